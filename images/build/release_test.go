package build

import (
	"os"
	"path/filepath"
	"testing"

	"slipway.dev/slipway/upgrade/layout"
	"slipway.dev/slipway/upgrade/release"
)

// TestRootfsInstallsLikeK3os writes a rootfs tarball, extracts it the way
// k3os's installer did (strip 3 into the system directory) and checks the
// payload, the current links and the broken variant's init.
func TestRootfsInstallsLikeK3os(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "slipway")
	if err := os.WriteFile(bin, []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(dir, "overlay")
	if err := os.MkdirAll(filepath.Join(overlay, "usr", "lib", "slipway"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(overlay, "usr", "lib", "slipway", "rootfs-init"), []byte("#!/bin/sh\ngood\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	o := Options{Slipway: bin, Overlay: overlay}
	for _, v := range []Version{{Name: "v1"}, {Name: "v3", Broken: true}} {
		tarball := filepath.Join(dir, v.Name+".tar.gz")
		if err := rootfsTarball(o, v, tarball); err != nil {
			t.Fatal(err)
		}
		sys := filepath.Join(dir, "sys-"+v.Name)
		if err := os.MkdirAll(sys, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := extractRootfs(tarball, sys); err != nil {
			t.Fatal(err)
		}
		l := layout.New(sys)
		if cur, err := l.Current(layout.Rootfs); err != nil || cur != v.Name {
			t.Fatalf("%s: k3os/current = %q, %v", v.Name, cur, err)
		}
		if cur, err := l.Current(layout.K3s); err != nil || cur != v.Name+"-k3s" {
			t.Fatalf("%s: k3s/current = %q, %v", v.Name, cur, err)
		}
		if b, err := os.ReadFile(filepath.Join(l.VersionDir(layout.Rootfs, v.Name), "k3os")); err != nil || string(b) != "binary" {
			t.Fatalf("%s: k3os binary = %q, %v", v.Name, b, err)
		}
		init, err := os.ReadFile(filepath.Join(l.VersionDir(layout.Rootfs, v.Name), "init"))
		if err != nil {
			t.Fatal(err)
		}
		if broken := string(init) == brokenInit; broken != v.Broken {
			t.Fatalf("%s: init broken = %v, want %v:\n%s", v.Name, broken, v.Broken, init)
		}
	}
}

func TestSumsCoverEveryArtifact(t *testing.T) {
	dir := t.TempDir()
	arch := release.Arch()
	for _, n := range []string{release.RootfsArtifact(arch), release.KernelArtifact(arch), release.InitrdArtifact(arch), release.KernelVersionArtifact(arch)} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeSums(dir, arch); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, release.SumsArtifact(arch)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sums, err := release.ParseSums(f)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := sha256File(filepath.Join(dir, release.KernelArtifact(arch)))
	if len(sums) != 4 || sums[release.KernelArtifact(arch)] != want {
		t.Fatalf("sums = %v", sums)
	}
}

// TestPreviousInSeries: the older kernel of a release pair is the highest
// ABI below the current one, of the same series and flavour.
func TestPreviousInSeries(t *testing.T) {
	names := []string{
		"linux-image-6.1.0-47-cloud-amd64", "linux-image-6.1.0-55-cloud-amd64", "linux-image-6.1.0-56-cloud-amd64",
		"linux-image-6.1.0-55-amd64", "linux-image-6.12.117+deb12-cloud-amd64", "linux-image-6.1.0-9-cloud-amd64",
		"linux-image-cloud-amd64", "linux-image-6.1.0-57-cloud-amd64",
	}
	for _, c := range []struct{ cur, want string }{
		{"linux-image-6.1.0-56-cloud-amd64", "linux-image-6.1.0-55-cloud-amd64"},
		{"linux-image-6.1.0-47-cloud-amd64", "linux-image-6.1.0-9-cloud-amd64"},
		{"linux-image-6.1.0-9-cloud-amd64", ""},
		{"linux-image-6.12.117+deb12-cloud-amd64", ""},
	} {
		got, err := previousInSeries(c.cur, names)
		if got != c.want || (err == nil) != (c.want != "") {
			t.Errorf("previousInSeries(%s) = %q, %v; want %q", c.cur, got, err, c.want)
		}
	}
}
