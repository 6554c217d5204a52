package config

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	opsv1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/manifest"
)

// File names slipway owns in the directories it writes.
const (
	ManifestFile  = "slipway.yaml"    // in the k3s auto-deploy directory
	K3sConfigFile = "50-slipway.yaml" // in the k3s config.yaml.d directory
)

// Options of Apply.
type Options struct {
	Sources Sources
	// ManifestsDir is where k3s auto-deploys manifests from.
	ManifestsDir string
	// K3sConfigDir is k3s's config.yaml.d directory (node labels).
	K3sConfigDir string
	// Image is the agent's image when the config names none (default: this build's).
	Image string
	// Out receives one line per file written or removed (nil: discard).
	Out io.Writer
}

func (o Options) withDefaults() Options {
	o.Sources = o.Sources.WithDefaults()
	if o.ManifestsDir == "" {
		o.ManifestsDir = DefaultManifestsDir
	}
	if o.K3sConfigDir == "" {
		o.K3sConfigDir = DefaultK3sConfigDir
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	return o
}

// Result says what Apply did to each file it owns.
type Result struct {
	Written, Removed, Unchanged []string
}

// Apply reads the cloud-config and makes the files slipway owns match it.
// Everything is computed and validated before the first write, so an
// invalid config changes nothing.
func Apply(_ context.Context, o Options) (*Result, error) {
	o = o.withDefaults()
	doc, files, err := Load(o.Sources)
	if err != nil {
		return nil, err
	}
	s, err := ParseSection(doc)
	if err != nil {
		return nil, fmt.Errorf("invalid cloud-config (read %s), nothing changed: %w", strings.Join(files, ", "), err)
	}
	want, err := desiredFiles(s, o)
	if err != nil {
		return nil, err
	}
	res := &Result{}
	for _, path := range sortedKeys(want) {
		if err := res.sync(path, want[path], o.Out); err != nil {
			return res, err
		}
	}
	return res, nil
}

// desiredFiles maps each file slipway owns to its content; nil means absent.
func desiredFiles(s Section, o Options) (map[string][]byte, error) {
	want := map[string][]byte{
		filepath.Join(o.ManifestsDir, ManifestFile):  nil,
		filepath.Join(o.K3sConfigDir, K3sConfigFile): nil,
	}
	if s.Operator.Enabled {
		body, err := manifest.Render(ManifestOptions(s.Operator, o.Image))
		if err != nil {
			return nil, err
		}
		want[filepath.Join(o.ManifestsDir, ManifestFile)] = body
	}
	if len(s.Labels) > 0 {
		body, err := k3sLabels(s.Labels)
		if err != nil {
			return nil, err
		}
		want[filepath.Join(o.K3sConfigDir, K3sConfigFile)] = body
	}
	return want, nil
}

func (r *Result) sync(path string, body []byte, out io.Writer) error {
	if body == nil {
		removed, err := removeIfPresent(path)
		if err != nil {
			return err
		}
		if removed {
			r.Removed = append(r.Removed, path)
			slog.Debug("removed", "file", path)
			fmt.Fprintln(out, "removed", path)
		}
		return nil
	}
	changed, err := writeIfChanged(path, body, 0o644)
	if err != nil {
		return err
	}
	if !changed {
		r.Unchanged = append(r.Unchanged, path)
		fmt.Fprintln(out, "unchanged", path)
		return nil
	}
	r.Written = append(r.Written, path)
	slog.Debug("wrote", "file", path)
	fmt.Fprintln(out, "wrote", path)
	return nil
}

// ManifestOptions maps the operator section onto the manifest's options;
// image is used when the section names none.
func ManifestOptions(op Operator, image string) manifest.Options {
	mo := manifest.Options{Namespace: op.Namespace, Image: image}
	if op.Image != "" {
		mo.Image = op.Image
	}
	mo.Channel = opsv1.UpdateChannelSpec{URL: op.URL, Version: op.Version, Window: op.Window}
	if op.Concurrency != nil {
		mo.Channel.Concurrency = *op.Concurrency
	}
	if len(op.NodeSelector) > 0 {
		mo.Channel.NodeSelector = &metav1.LabelSelector{MatchLabels: op.NodeSelector}
	}
	return mo
}

// k3sLabels renders a k3s config drop-in that adds the node labels.
func k3sLabels(labels map[string]string) ([]byte, error) {
	list := make([]string, 0, len(labels))
	for k, v := range labels {
		list = append(list, k+"="+v)
	}
	sort.Strings(list)
	body, err := yaml.Marshal(map[string][]string{"node-label+": list})
	if err != nil {
		return nil, fmt.Errorf("render node labels: %w", err)
	}
	return append([]byte("# Written by `slipway config apply` from the cloud-config's slipway.labels.\n"), body...), nil
}
