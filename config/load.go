// Package config reads a node's cloud-config (the k3os locations, merged in
// order), validates its `slipway:` section and writes what that section
// enables: the operator's manifest into the k3s auto-deploy directory and
// the node's labels into a k3s config drop-in. Writes are idempotent and
// atomic; an invalid config changes nothing.
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"sigs.k8s.io/yaml"
)

// Default locations, as k3os reads them.
const (
	DefaultSystemDir    = "/k3os/system"
	DefaultLocalConfig  = "/var/lib/rancher/k3os/config.yaml"
	DefaultConfigDir    = "/var/lib/rancher/k3os/config.d"
	DefaultManifestsDir = "/var/lib/rancher/k3s/server/manifests"
	DefaultK3sConfigDir = "/etc/rancher/k3s/config.yaml.d"
)

// Sources names the cloud-config files to merge.
type Sources struct {
	// SystemDir holds the image's config.yaml (read first).
	SystemDir string
	// LocalConfig is the node's own config.yaml (read second).
	LocalConfig string
	// ConfigDir holds *.yaml drop-ins, merged last in lexical order.
	ConfigDir string
}

// WithDefaults fills empty fields with the k3os locations.
func (s Sources) WithDefaults() Sources {
	if s.SystemDir == "" {
		s.SystemDir = DefaultSystemDir
	}
	if s.LocalConfig == "" {
		s.LocalConfig = DefaultLocalConfig
	}
	if s.ConfigDir == "" {
		s.ConfigDir = DefaultConfigDir
	}
	return s
}

// Files lists the files that exist, in merge order.
func (s Sources) Files() ([]string, error) {
	s = s.WithDefaults()
	var files []string
	for _, f := range []string{filepath.Join(s.SystemDir, "config.yaml"), s.LocalConfig} {
		if _, err := os.Stat(f); err == nil {
			files = append(files, f)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("cloud-config %s: %w", f, err)
		}
	}
	dropIns, err := filepath.Glob(filepath.Join(s.ConfigDir, "*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", s.ConfigDir, err)
	}
	sort.Strings(dropIns)
	return append(files, dropIns...), nil
}

// Load reads and merges the existing files of s. No file at all is an empty config.
func Load(s Sources) (map[string]any, []string, error) {
	files, err := s.Files()
	if err != nil {
		return nil, nil, err
	}
	merged := map[string]any{}
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, fmt.Errorf("read cloud-config: %w", err)
		}
		var doc map[string]any
		if err := yaml.Unmarshal(body, &doc); err != nil {
			return nil, nil, fmt.Errorf("cloud-config %s is not a YAML mapping: %w", f, err)
		}
		merged = Merge(merged, doc)
	}
	return merged, files, nil
}

// Merge lays over on top of base: mappings merge key by key, recursively;
// any other value (scalars, lists, null) in over replaces base's. Neither
// argument is modified.
func Merge(base, over map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		bm, bok := out[k].(map[string]any)
		om, ook := v.(map[string]any)
		if bok && ook {
			out[k] = Merge(bm, om)
			continue
		}
		out[k] = v
	}
	return out
}
