package releasetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"slipway.dev/slipway/upgrade/release"
)

// The release verifies with sha256sum -c and unpacks with tar the way k3os's
// own upgrade script did.
func TestWriteIsK3osFormat(t *testing.T) {
	mirror := t.TempDir()
	rel, err := Write(Options{Mirror: mirror, Version: "v1.2.3", Arch: "amd64", RootfsFiles: 70})
	if err != nil {
		t.Fatal(err)
	}
	if len(rel.Sums) != 4 {
		t.Fatalf("sums: %v", rel.Sums)
	}
	cmd := exec.Command("sha256sum", "-c", release.SumsArtifact("amd64"))
	cmd.Dir = rel.Dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sha256sum -c: %v\n%s", err, out)
	}
	sys := t.TempDir()
	cmd = exec.Command("tar", "xzf", filepath.Join(rel.Dir, release.RootfsArtifact("amd64")), "--strip-components=3", "-C", sys)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	for p, want := range map[string]string{"k3os/current": "v1.2.3", "k3s/current": "v1.2.3-k3s1"} {
		if got, err := os.Readlink(filepath.Join(sys, p)); err != nil || got != want {
			t.Errorf("%s -> %q, %v; want %s", p, got, err, want)
		}
	}
	for _, p := range []string{"k3os/v1.2.3/k3os", "k3os/v1.2.3/lib/01/file-00069.so", "k3s/v1.2.3-k3s1/k3s", "k3s/v1.2.3-k3s1/k3s-install.sh"} {
		if _, err := os.Stat(filepath.Join(sys, p)); err != nil {
			t.Error(err)
		}
	}
	kv, _ := os.ReadFile(filepath.Join(rel.Dir, release.KernelVersionArtifact("amd64")))
	if strings.TrimSpace(string(kv)) != "5.15.0-v1.2.3" {
		t.Errorf("kernel version %q", kv)
	}
	if l, _ := os.ReadFile(filepath.Join(mirror, "latest")); strings.TrimSpace(string(l)) != "v1.2.3" {
		t.Errorf("latest %q", l)
	}
}

func TestWriteCallerFiles(t *testing.T) {
	src := filepath.Join(t.TempDir(), "kernel")
	if err := os.WriteFile(src, []byte("my kernel"), 0o644); err != nil {
		t.Fatal(err)
	}
	rel, err := Write(Options{Mirror: t.TempDir(), Version: "v2", Kernel: src, NoLatest: true})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(rel.Dir, release.KernelArtifact(rel.Arch)))
	if string(b) != "my kernel" {
		t.Fatalf("kernel %q", b)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(rel.Dir), "latest")); !os.IsNotExist(err) {
		t.Fatal("NoLatest wrote latest")
	}
	if _, err := Write(Options{Mirror: t.TempDir(), Version: "../x"}); err == nil {
		t.Fatal("bad version: want an error")
	}
}
