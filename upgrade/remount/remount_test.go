package remount

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
35 22 0:31 / /k3os/system ro,nosuid,relatime shared:2 - ext4 /dev/vda2 ro
36 35 0:32 / /k3os/system/with\040space rw,relatime - tmpfs tmpfs rw,size=1024k
`

func TestParseAndContaining(t *testing.T) {
	ms, err := ParseMountinfo(strings.NewReader(sample))
	if err != nil || len(ms) != 3 {
		t.Fatalf("%v %v", ms, err)
	}
	for path, want := range map[string]string{
		"/k3os/system":              "/k3os/system",
		"/k3os/system/k3os/current": "/k3os/system",
		"/k3os/systemd":             "/",
		"/k3os/system/with space/x": "/k3os/system/with space",
		"/":                         "/",
	} {
		m, ok := Containing(ms, path)
		if !ok || m.Point != want {
			t.Errorf("Containing(%q) = %q, want %q", path, m.Point, want)
		}
	}
	if !ms[1].ReadOnly() || !ms[1].SuperReadOnly() || ms[0].ReadOnly() {
		t.Error("read-only flags wrong")
	}
	if _, err := ParseMountinfo(strings.NewReader("garbage\n")); err == nil {
		t.Error("malformed line: want an error")
	}
}

// mountTmpfs mounts a tmpfs on a temp dir; the test is skipped only when not root.
func mountTmpfs(t *testing.T, opts string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs (run the tests as root)")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	return dir
}

func TestWritableRoundTrip(t *testing.T) {
	for _, how := range []string{"superblock", "bind"} {
		t.Run(how, func(t *testing.T) {
			dir := mountTmpfs(t, "size=1m,nosuid")
			args := []string{"-o", "remount,ro", dir}
			if how == "bind" {
				args = []string{"-o", "remount,bind,ro", dir}
			}
			if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
				t.Fatalf("mount %v: %v %s", args, err, out)
			}
			sub := filepath.Join(dir, "sub")
			if IsWritable(dir) || os.Mkdir(sub, 0o755) == nil {
				t.Fatal("the read-only tmpfs is writable")
			}
			restore, err := Writable(dir)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(sub, 0o755); err != nil || !IsWritable(dir) {
				t.Fatalf("after Writable: %v", err)
			}
			if err := restore(); err != nil {
				t.Fatal(err)
			}
			if IsWritable(dir) || os.Mkdir(filepath.Join(dir, "other"), 0o755) == nil {
				t.Fatal("restore left it writable")
			}
			m, _ := Find(dir)
			if !has(m.Options, "nosuid") {
				t.Fatalf("nosuid lost: %v", m.Options)
			}
		})
	}
}

func TestWritableAlreadyRW(t *testing.T) {
	dir := mountTmpfs(t, "size=1m")
	restore, err := Writable(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := restore(); err != nil || !IsWritable(dir) {
		t.Fatalf("restore of a writable mount changed it: %v", err)
	}
}
