// Command krewgen writes the krew plugin manifest of kubectl-eds (the
// `eds` plugin) for a release, from the release's plugin archives
// kubectl-eds_<version>_<os>_<arch>.tar.gz (each holding the slipway binary
// as kubectl-eds: the multi-call binary runs `slipway eds` under that name,
// and slipway's LICENSE, which krew's index validator requires installed):
//
//	go run ./internal/cmd/krewgen -version v1.2.3 -url https://example/releases/download/v1.2.3 -dir build/release > eds.yaml
//
// scripts/release-krew builds the archives and runs it.
package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/krew/pkg/constants"
	"sigs.k8s.io/krew/pkg/index"
	"sigs.k8s.io/yaml"
)

// PluginName is the plugin's name in krew's index: `kubectl krew install eds`.
const PluginName = "eds"

// Plugin, Platform and FileOperation are krew's own manifest types
// (sigs.k8s.io/krew/pkg/index, krew.googlecontainertools.github.com/v1alpha2).
type (
	Plugin        = index.Plugin
	Platform      = index.Platform
	FileOperation = index.FileOperation
)

// APIVersion is the manifest's apiVersion (krew's constants.CurrentAPIVersion).
const APIVersion = constants.CurrentAPIVersion

var archiveName = regexp.MustCompile(`^kubectl-eds_(v[^_]+)_([a-z0-9]+)_([a-z0-9]+)\.tar\.gz$`)

func main() {
	version := flag.String("version", "", "release version (v1.2.3)")
	url := flag.String("url", "", "where the release's archives are downloaded from (the archive's name is appended)")
	homepage := flag.String("homepage", "", "the plugin's homepage")
	dir := flag.String("dir", "", "folder holding the release's kubectl-eds_<version>_<os>_<arch>.tar.gz")
	flag.Parse()
	p, err := Build(*version, *url, *homepage, *dir)
	if err == nil {
		var b []byte
		if b, err = Marshal(p); err == nil {
			_, err = os.Stdout.Write(b)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "krewgen:", err)
		os.Exit(1)
	}
}

// Build returns the manifest of the archives of version in dir.
func Build(version, url, homepage, dir string) (*Plugin, error) {
	if version == "" || url == "" || dir == "" {
		return nil, fmt.Errorf("-version, -url and -dir are required")
	}
	names, err := filepath.Glob(filepath.Join(dir, "kubectl-eds_*.tar.gz"))
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	p := &Plugin{TypeMeta: metav1.TypeMeta{APIVersion: APIVersion, Kind: constants.PluginKind}, ObjectMeta: metav1.ObjectMeta{Name: PluginName},
		Spec: index.PluginSpec{Version: version, Homepage: homepage,
			ShortDescription: "Canary and rolling updates of ExtendedDaemonSets",
			Description: "kubectl eds shows and steers slipway's ExtendedDaemonSets (field-compatible with DataDog's):\n" +
				"get, canary validate|pause|unpause|fail|pods, pods, diff, pause-rollout, freeze.\n" +
				"It is the slipway binary running `slipway eds` under the name kubectl-eds.",
			Caveats: "Needs slipway's ExtendedDaemonSet controller in the cluster (slipway eds manifest, or the slipway-eds Helm chart)."}}
	for _, n := range names {
		m := archiveName.FindStringSubmatch(filepath.Base(n))
		if m == nil || m[1] != version {
			continue
		}
		if err := checkArchive(n); err != nil {
			return nil, err
		}
		sum, err := fileSHA256(n)
		if err != nil {
			return nil, err
		}
		var pl Platform
		pl.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"os": m[2], "arch": m[3]}}
		pl.URI = strings.TrimSuffix(url, "/") + "/" + filepath.Base(n)
		pl.Sha256, pl.Bin = sum, "kubectl-eds"
		pl.Files = []FileOperation{{From: "kubectl-eds", To: "."}, {From: LicenseFile, To: "."}}
		p.Spec.Platforms = append(p.Spec.Platforms, pl)
	}
	if len(p.Spec.Platforms) == 0 {
		return nil, fmt.Errorf("no kubectl-eds_%s_<os>_<arch>.tar.gz in %s: run scripts/release-krew", version, dir)
	}
	return p, Validate(p)
}

// LicenseFile is slipway's license in each archive, installed beside the
// plugin: krew's index validator (validate-krew-manifest) refuses a plugin
// whose installation holds no LICENSE (or alike) file.
const LicenseFile = "LICENSE"

// licenseNames are the file names krew's validator takes as a license
// (lowercased).
var licenseNames = map[string]bool{"license": true, "license.txt": true, "license.md": true,
	"licenses": true, "licenses.txt": true, "licenses.md": true, "copying": true, "copying.txt": true}

// checkArchive makes sure the archive at path holds the plugin binary and
// a non-empty LICENSE, the two files the manifest installs from it.
func checkArchive(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	tr := tar.NewReader(zr)
	found := map[string]bool{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if h.Typeflag == tar.TypeReg && h.Size > 0 {
			found[strings.TrimPrefix(h.Name, "./")] = true
		}
	}
	for _, want := range []string{"kubectl-eds", LicenseFile} {
		if !found[want] {
			return fmt.Errorf("%s holds no %s: pack it with scripts/release-krew", path, want)
		}
	}
	return nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

var (
	semver    = regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)
	sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)
	nameRE    = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)
)

// Validate applies the rules krew's index validation applies to a plugin
// manifest (krew v0.4: internal/index/validation, which krew keeps internal:
// no other module can import it, so TestKrewInstallsTheManifest runs it
// through the pinned krew binary and this is the same check at build time): name, a v-prefixed
// semantic version, a short description under 256 characters, a description,
// at least one platform, each with a selector, an https URI, a sha256 and a
// bin among the files it installs, no two platforms matching the same os/arch;
// and, as krew's validate-krew-manifest checks by installing the plugin, a
// license file among the files each platform installs.
func Validate(p *Plugin) error {
	switch {
	case p.APIVersion != APIVersion || p.Kind != constants.PluginKind:
		return fmt.Errorf("apiVersion/kind %s/%s: want %s %s", p.APIVersion, p.Kind, APIVersion, constants.PluginKind)
	case !nameRE.MatchString(p.Name):
		return fmt.Errorf("plugin name %q is not a lowercase name", p.Name)
	case !semver.MatchString(p.Spec.Version):
		return fmt.Errorf("version %q is not v-prefixed semantic version", p.Spec.Version)
	case p.Spec.ShortDescription == "" || len(p.Spec.ShortDescription) > 255:
		return fmt.Errorf("shortDescription must have 1 to 255 characters")
	case p.Spec.Description == "":
		return fmt.Errorf("description is empty")
	case len(p.Spec.Platforms) == 0:
		return fmt.Errorf("no platform")
	}
	seen := map[string]bool{}
	for i, pl := range p.Spec.Platforms {
		if pl.Selector == nil {
			return fmt.Errorf("platform %d has no selector", i)
		}
		key := pl.Selector.MatchLabels["os"] + "/" + pl.Selector.MatchLabels["arch"]
		switch {
		case len(pl.Selector.MatchLabels) == 0:
			return fmt.Errorf("platform %d has no selector", i)
		case seen[key]:
			return fmt.Errorf("two platforms for %s", key)
		case !strings.HasPrefix(pl.URI, "https://") && !strings.HasPrefix(pl.URI, "http://"):
			return fmt.Errorf("platform %s: uri %q is not http(s)", key, pl.URI)
		case !sha256Hex.MatchString(pl.Sha256):
			return fmt.Errorf("platform %s: sha256 %q is not 64 lowercase hex digits", key, pl.Sha256)
		case pl.Bin == "" || strings.Contains(pl.Bin, "/"):
			return fmt.Errorf("platform %s: bin %q must be a file name", key, pl.Bin)
		case len(pl.Files) == 0:
			return fmt.Errorf("platform %s: no files", key)
		case !installsLicense(pl.Files):
			return fmt.Errorf("platform %s: installs no LICENSE (krew's index validator requires one)", key)
		}
		seen[key] = true
	}
	return nil
}

// installsLicense says whether files copies a license file krew's validator
// recognises.
func installsLicense(files []FileOperation) bool {
	for _, f := range files {
		if licenseNames[strings.ToLower(filepath.Base(f.From))] {
			return true
		}
	}
	return false
}

// Marshal writes p as krew's index holds manifests: YAML without the
// creationTimestamp an empty ObjectMeta marshals to null.
func Marshal(p *Plugin) ([]byte, error) {
	b, err := yaml.Marshal(p)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if meta, ok := m["metadata"].(map[string]any); ok {
		delete(meta, "creationTimestamp")
	}
	return yaml.Marshal(m)
}
