package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// writeArchive writes a plugin archive holding kubectl-eds (a script that
// prints "eds plugin") and the repository's LICENSE, as scripts/release-krew
// packs them, and returns its sha256.
func writeArchive(t *testing.T, path string) string {
	t.Helper()
	lic, err := os.ReadFile("../../../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	return writeArchiveOf(t, path, map[string][]byte{"kubectl-eds": []byte("#!/bin/sh\necho eds plugin \"$@\"\n"), LicenseFile: lic})
}

// writeArchiveOf writes a tar.gz of files at path and returns its sha256.
func writeArchiveOf(t *testing.T, path string, files map[string][]byte) string {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, name := range []string{"kubectl-eds", LicenseFile} {
		body, ok := files[name]
		if !ok {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write(body)
	}
	tw.Close()
	gz.Close()
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(s[:])
}

func TestBuildNamesEachArchive(t *testing.T) {
	dir := t.TempDir()
	sums := map[string]string{}
	for _, arch := range []string{"amd64", "arm64"} {
		sums[arch] = writeArchive(t, filepath.Join(dir, "kubectl-eds_v1.2.3_linux_"+arch+".tar.gz"))
	}
	writeArchive(t, filepath.Join(dir, "kubectl-eds_v1.2.2_linux_amd64.tar.gz")) // another release: ignored
	p, err := Build("v1.2.3", "https://example.org/dl/v1.2.3/", "", dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Spec.Platforms) != 2 {
		t.Fatalf("platforms: %+v", p.Spec.Platforms)
	}
	for _, pl := range p.Spec.Platforms {
		arch := pl.Selector.MatchLabels["arch"]
		if pl.Sha256 != sums[arch] || pl.URI != "https://example.org/dl/v1.2.3/kubectl-eds_v1.2.3_linux_"+arch+".tar.gz" || pl.Selector.MatchLabels["os"] != "linux" {
			t.Errorf("platform %s: %+v", arch, pl)
		}
	}
	if _, err := Build("v9.9.9", "https://example.org", "", dir); err == nil {
		t.Error("a release without archives gave a manifest")
	}
}

// TestBuildRefusesAnArchiveWithoutLicense: krew's index validator refuses a
// plugin that installs no license, so krewgen refuses such an archive first.
func TestBuildRefusesAnArchiveWithoutLicense(t *testing.T) {
	dir := t.TempDir()
	writeArchiveOf(t, filepath.Join(dir, "kubectl-eds_v1.2.3_linux_amd64.tar.gz"), map[string][]byte{"kubectl-eds": []byte("x")})
	if _, err := Build("v1.2.3", "https://example.org", "", dir); err == nil || !strings.Contains(err.Error(), "holds no LICENSE") {
		t.Errorf("an archive without LICENSE: %v", err)
	}
}

func TestValidateRefuses(t *testing.T) {
	good := func() *Plugin {
		p, err := Build("v1.0.0", "https://example.org", "", func() string {
			d := t.TempDir()
			writeArchive(t, filepath.Join(d, "kubectl-eds_v1.0.0_linux_amd64.tar.gz"))
			return d
		}())
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for name, mangle := range map[string]func(*Plugin){
		"a version without v":    func(p *Plugin) { p.Spec.Version = "1.0.0" },
		"an upper-case name":     func(p *Plugin) { p.Name = "EDS" },
		"no short description":   func(p *Plugin) { p.Spec.ShortDescription = "" },
		"a short sha256":         func(p *Plugin) { p.Spec.Platforms[0].Sha256 = "abc" },
		"a bin in a folder":      func(p *Plugin) { p.Spec.Platforms[0].Bin = "bin/kubectl-eds" },
		"two platforms the same": func(p *Plugin) { p.Spec.Platforms = append(p.Spec.Platforms, p.Spec.Platforms[0]) },
		"no platform":            func(p *Plugin) { p.Spec.Platforms = nil },
		"a file:// uri":          func(p *Plugin) { p.Spec.Platforms[0].URI = "file:///tmp/x.tar.gz" },
		"no license installed":   func(p *Plugin) { p.Spec.Platforms[0].Files = p.Spec.Platforms[0].Files[:1] },
	} {
		p := good()
		mangle(p)
		if err := Validate(p); err == nil {
			t.Errorf("%s: Validate accepted it", name)
		}
	}
}

// TestKrewInstallsTheManifest gives the manifest and its archive to krew
// itself (pinned, built by scripts/install-tools): `krew install --manifest
// --archive` runs krew's own manifest validation, checks the sha256 and
// installs the plugin, which then runs as kubectl-eds.
func TestKrewInstallsTheManifest(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the release packs linux archives")
	}
	krew := toolPath(t, "krew")
	dir := t.TempDir()
	archive := filepath.Join(dir, "kubectl-eds_v1.2.3_linux_"+runtime.GOARCH+".tar.gz")
	writeArchive(t, archive)
	p, err := Build("v1.2.3", "https://example.org/dl", "", dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(dir, "eds.yaml")
	if err := os.WriteFile(manifest, b, 0o644); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "krew")
	cmd := exec.Command(krew, "install", "--manifest="+manifest, "--archive="+archive)
	cmd.Env = append(os.Environ(), "KREW_ROOT="+root, "KREW_NO_UPGRADE_CHECK=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("krew install: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(root, "bin", "kubectl-eds"), "get").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "eds plugin get") {
		t.Errorf("the installed kubectl-eds: %v\n%s", err, out)
	}
}

// TestKrewIndexValidatorAccepts runs krew's own index validator,
// validate-krew-manifest (built from the krew module scripts/install-tools
// pins), on the manifest of both architectures' archives served over HTTP:
// it checks the manifest's structure, installs each platform with krew and
// requires a LICENSE among the installed files.
func TestKrewIndexValidatorAccepts(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the release packs linux archives")
	}
	krew := toolPath(t, "krew")
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	install := exec.Command("go", "install", "sigs.k8s.io/krew/cmd/validate-krew-manifest@"+krewVersion(t))
	install.Env = append(os.Environ(), "GOBIN="+bin, "CGO_ENABLED=0")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("build validate-krew-manifest: %v\n%s", err, out)
	}
	// The validator runs `kubectl krew install`: a kubectl that is krew.
	os.WriteFile(filepath.Join(bin, "kubectl"), []byte("#!/bin/sh\n[ \"$1\" = krew ] && shift\nexec "+krew+" \"$@\"\n"), 0o755)
	rel := filepath.Join(dir, "release")
	os.Mkdir(rel, 0o755)
	for _, arch := range []string{"amd64", "arm64"} {
		writeArchive(t, filepath.Join(rel, "kubectl-eds_v1.2.3_linux_"+arch+".tar.gz"))
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(rel)))
	defer srv.Close()
	p, err := Build("v1.2.3", srv.URL, "", rel)
	if err != nil {
		t.Fatal(err)
	}
	validate := func(p *Plugin) ([]byte, error) {
		b, err := yaml.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		manifest := filepath.Join(dir, PluginName+".yaml") // the validator wants <name>.yaml
		os.WriteFile(manifest, b, 0o644)
		cmd := exec.Command(filepath.Join(bin, "validate-krew-manifest"), "-manifest", manifest)
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "KREW_NO_UPGRADE_CHECK=1")
		return cmd.CombinedOutput()
	}
	if out, err := validate(p); err != nil {
		t.Fatalf("validate-krew-manifest refused the manifest: %v\n%s", err, out)
	}
	// Without the LICENSE copied, krew's validator refuses it: the check
	// above is the validator's, not a formality.
	for i := range p.Spec.Platforms {
		p.Spec.Platforms[i].Files = p.Spec.Platforms[i].Files[:1]
	}
	if out, err := validate(p); err == nil || !strings.Contains(string(out), "license") {
		t.Errorf("validate-krew-manifest accepted a plugin installing no LICENSE: %v\n%s", err, out)
	}
}

// krewVersion is the krew release scripts/install-tools pins.
func krewVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../../scripts/install-tools")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^KREW_VERSION=(\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no KREW_VERSION= in scripts/install-tools")
	}
	return string(m[1])
}

// toolPath is a binary of the tools directory ($SLIPWAY_TOOLS_DIR, else what
// scripts/install-tools prints): a missing tool fails the test.
func toolPath(t *testing.T, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: %s is a built tool", name)
	}
	dir := os.Getenv("SLIPWAY_TOOLS_DIR")
	if dir == "" {
		out, err := exec.Command("../../../scripts/install-tools").Output()
		if err != nil {
			t.Fatalf("scripts/install-tools: %v", err)
		}
		f := strings.Fields(string(out))
		dir = f[len(f)-1]
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("no %s in %s (run scripts/install-tools): %v", name, dir, err)
	}
	return p
}
