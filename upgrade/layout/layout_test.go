package layout

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSetLinkAndRead(t *testing.T) {
	l := New(t.TempDir())
	if err := os.MkdirAll(l.VersionDir(Rootfs, "v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if v, err := l.Current(Rootfs); err != nil || v != "" {
		t.Fatalf("Current on empty dir = %q, %v; want \"\", nil", v, err)
	}
	if err := l.SetLink(Rootfs, CurrentLink, "v1"); err != nil {
		t.Fatal(err)
	}
	if err := l.SetLink(Rootfs, CurrentLink, "v2"); err != nil {
		t.Fatal(err)
	}
	if err := l.SetLink(Rootfs, PreviousLink, "v1"); err != nil {
		t.Fatal(err)
	}
	cur, err := l.Current(Rootfs)
	if err != nil || cur != "v2" {
		t.Fatalf("Current = %q, %v; want v2", cur, err)
	}
	prev, err := l.Previous(Rootfs)
	if err != nil || prev != "v1" {
		t.Fatalf("Previous = %q, %v; want v1", prev, err)
	}
	target, err := os.Readlink(filepath.Join(l.Dir(Rootfs), "current"))
	if err != nil || target != "v2" {
		t.Fatalf("link target = %q, %v; want relative v2", target, err)
	}
	if _, err := os.Lstat(filepath.Join(l.Dir(Rootfs), "current.tmp")); !os.IsNotExist(err) {
		t.Fatalf("current.tmp left behind: %v", err)
	}
}

func TestLinkAbsoluteAndOutside(t *testing.T) {
	l := New(t.TempDir())
	if err := os.MkdirAll(l.Dir(K3s), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(l.VersionDir(K3s, "v9"), filepath.Join(l.Dir(K3s), "current")); err != nil {
		t.Fatal(err)
	}
	if v, err := l.Current(K3s); err != nil || v != "v9" {
		t.Fatalf("absolute link inside: %q, %v; want v9", v, err)
	}
	if err := os.Symlink("/etc", filepath.Join(l.Dir(K3s), "previous")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Previous(K3s); err == nil {
		t.Fatal("link pointing outside the component folder: want an error")
	}
}

func TestValidVersion(t *testing.T) {
	for _, tc := range []struct {
		v  string
		ok bool
	}{
		{"v1.2.3", true}, {"v0.21.5-k3s2r1", true}, {"5.4.0-88-generic", true},
		{"", false}, {".", false}, {"..", false}, {"a/b", false}, {".hidden", false},
		{"v1.tmp", false}, {"x\x00y", false},
	} {
		if err := ValidVersion(tc.v); (err == nil) != tc.ok {
			t.Errorf("ValidVersion(%q) = %v, want ok=%v", tc.v, err, tc.ok)
		}
	}
	if err := New(t.TempDir()).SetLink(Rootfs, CurrentLink, "../x"); err == nil {
		t.Fatal("SetLink to ../x: want an error")
	}
}
