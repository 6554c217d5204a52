package main

import (
	"archive/tar"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"slipway.dev/slipway/images/oci"
)

// TestLinksAreTheDockerfiles: the image without Docker carries the same
// multi-call names as the Dockerfile's image.
func TestLinksAreTheDockerfiles(t *testing.T) {
	b, err := os.ReadFile("../../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if want := "for n in " + strings.Join(Links, " ") + ";"; !strings.Contains(string(b), want) {
		t.Errorf("the Dockerfile does not link %q: keep ocipack.Links and the Dockerfile's names together", want)
	}
}

// TestImageShipsTheLicense: every architecture's image carries the
// repository's LICENSE (Apache-2.0) at LicensePath, as does the Dockerfile's.
func TestImageShipsTheLicense(t *testing.T) {
	lic, err := os.ReadFile("../../../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(lic), "Apache License\n                           Version 2.0, January 2004") {
		t.Fatal("LICENSE is not the Apache License 2.0")
	}
	dir := t.TempDir()
	ca, archive := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "slipway-oci.tar")
	os.WriteFile(ca, []byte("roots"), 0o644)
	var bins []string
	for arch, m := range map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64} {
		p := filepath.Join(dir, arch)
		os.WriteFile(p, elfHeader(m), 0o755)
		bins = append(bins, arch+"="+p)
	}
	if err := run("localhost/slipway:test", archive, ca, "../../../LICENSE", bins); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	plats, err := oci.Verify(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, arch := range []string{"amd64", "arm64"} {
		if got, want := plats[arch][LicensePath], fmt.Sprintf("%d bytes", len(lic)); got != want {
			t.Errorf("%s image: /%s is %q, want the LICENSE's %s", arch, LicensePath, got, want)
		}
	}
	if err := run("localhost/slipway:test", archive, ca, filepath.Join(dir, "none"), bins); err == nil {
		t.Error("ocipack wrote an image without a license")
	}
	docker, err := os.ReadFile("../../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(docker), "COPY LICENSE /"+LicensePath+"\n") {
		t.Errorf("the Dockerfile does not COPY LICENSE /%s", LicensePath)
	}
}

// TestImageRunsAsNonRoot: every architecture's image config names the
// non-root User, so a pod with runAsNonRoot and no runAsUser starts (the
// kubelet refuses one whose image would run as root), and the Dockerfile's
// image says the same.
func TestImageRunsAsNonRoot(t *testing.T) {
	dir := t.TempDir()
	ca, archive := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "slipway-oci.tar")
	os.WriteFile(ca, []byte("roots"), 0o644)
	amd := filepath.Join(dir, "amd64")
	os.WriteFile(amd, elfHeader(elf.EM_X86_64), 0o755)
	if err := run("localhost/slipway:test", archive, ca, "../../../LICENSE", []string{"amd64=" + amd}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var configs int
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		var cfg oci.Config
		if !strings.HasPrefix(h.Name, "blobs/") || json.Unmarshal(b, &cfg) != nil || cfg.RootFS.Type != "layers" {
			continue
		}
		configs++
		if cfg.Config.User != "65532:65532" {
			t.Errorf("the %s image's config has User %q, want 65532:65532", cfg.Architecture, cfg.Config.User)
		}
	}
	if configs != 1 {
		t.Errorf("found %d image configs, want 1", configs)
	}
	docker, err := os.ReadFile("../../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(docker), "\nUSER "+User+"\n") {
		t.Errorf("the Dockerfile's image does not run as USER %s", User)
	}
}

// TestLabelFlags: -label KEY=VALUE flags become the image config's labels;
// a flag without = is refused.
func TestLabelFlags(t *testing.T) {
	var l labelFlags
	for _, s := range []string{"org.opencontainers.image.version=v1.2.3", "org.opencontainers.image.licenses=Apache-2.0"} {
		if err := l.Set(s); err != nil {
			t.Fatal(err)
		}
	}
	if l["org.opencontainers.image.version"] != "v1.2.3" || len(l) != 2 {
		t.Errorf("labels %v", l)
	}
	if err := l.Set("novalue"); err == nil {
		t.Error("a label without = was taken")
	}
}
