package platform_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"slipway.dev/slipway/ops/updateoperator/platform"
	"slipway.dev/slipway/ops/updateoperator/platform/brapitest"
	"slipway.dev/slipway/upgrade/layout"
)

func TestStaged(t *testing.T) {
	t1, t2, t3 := time.Unix(100, 0), time.Unix(200, 0), time.Unix(300, 0)
	marked := func(name string, at time.Time) platform.VersionDir {
		return platform.VersionDir{Name: name, Marked: true, Installed: at}
	}
	tests := []struct {
		name              string
		dirs              []platform.VersionDir
		current, previous string
		want              []string
	}{
		{"staged after current: removed", []platform.VersionDir{marked("v1", t1), marked("v2", t2)}, "v1", "", []string{"v2"}},
		{"activated (current): kept", []platform.VersionDir{marked("v1", t1), marked("v2", t2)}, "v2", "v1", nil},
		{"previous: kept", []platform.VersionDir{marked("v0", t1), marked("v1", t2), marked("v2", t3)}, "v1", "v0", []string{"v2"}},
		{"older release kept around: kept", []platform.VersionDir{marked("v0", t1), marked("v1", t2)}, "v1", "", nil},
		{"not installed by the upgrader: kept", []platform.VersionDir{marked("v1", t1), {Name: "custom"}}, "v1", "", nil},
		{"current without a marker (k3os's own): every marked other goes", []platform.VersionDir{{Name: "v1"}, marked("v2", t2)}, "v1", "", []string{"v2"}},
		{"no current link: nothing", []platform.VersionDir{marked("v2", t2)}, "", "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := platform.Staged(tc.dirs, tc.current, tc.previous); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Staged = %v, want %v", got, tc.want)
			}
		})
	}
}

// A prepared update is discarded from a real system directory: the staged
// version folders go, current and previous stay, and the update can be
// prepared and performed again afterwards. A performed one (the links
// moved, the host not rebooted) is undone: current names what runs again.
func TestSlipwayResetDiscardsTheStagedUpdate(t *testing.T) {
	sys, src, lock := slipwayAtV1(t, 3)
	c := ctx(t)
	p := &platform.Slipway{SystemDir: sys, Source: src, LockFile: lock, BootID: fixedBoot("boot-1")}
	if _, err := p.Check(c); err != nil {
		t.Fatal(err)
	}
	if err := p.Reset(c); err != nil {
		t.Fatalf("reset with nothing staged: %v", err)
	}
	if err := p.Prepare(c); err != nil {
		t.Fatal(err)
	}
	lay := layout.New(sys)
	staged := lay.VersionDir(layout.Rootfs, "v2")
	if _, err := os.Stat(staged); err != nil {
		t.Fatalf("prepare staged nothing: %v", err)
	}
	if err := p.Reset(c); err != nil {
		t.Fatalf("reset: %v", err)
	}
	if _, err := os.Stat(staged); !os.IsNotExist(err) {
		t.Errorf("the staged %s is still there after the reset (%v)", staged, err)
	}
	if v, _ := p.Version(c); v != "v1" {
		t.Errorf("after the reset the version is %q, want v1", v)
	}
	if _, err := os.Stat(lay.VersionDir(layout.Rootfs, "v1")); err != nil {
		t.Errorf("the reset removed the running version: %v", err)
	}
	if err := p.Prepare(c); err != nil {
		t.Fatalf("prepare again after the reset: %v", err)
	}
	if err := p.Perform(c); err != nil {
		t.Fatalf("perform after the reset: %v", err)
	}
	if cur, _ := lay.Current(layout.Rootfs); cur != "v2" {
		t.Fatalf("perform left current at %q", cur)
	}
	if err := p.Reset(c); err != nil {
		t.Fatal(err)
	}
	if cur, _ := lay.Current(layout.Rootfs); cur != "v1" {
		t.Errorf("a reset after perform must undo the activation: current names %q, want the running v1", cur)
	}
	if st, err := p.Check(c); err != nil || st != (platform.Status{Current: "v1", Available: "v2"}) {
		t.Errorf("Check after the reset = %+v, %v; want v1 running, nothing staged, v2 available", st, err)
	}
	if _, err := os.Stat(staged); err != nil {
		t.Errorf("the reset removed the activated %s (kept as previous, for the retry): %v", staged, err)
	}
	if err := p.Perform(c); err != nil {
		t.Fatalf("perform again after the reset: %v", err)
	}
	if cur, _ := lay.Current(layout.Rootfs); cur != "v2" {
		t.Errorf("the retried perform left current at %q", cur)
	}
}

// An activated, not booted update is deactivated through the host API (its
// 423s retried); a host with nothing activated is left as it is.
func TestBottlerocketResetDeactivates(t *testing.T) {
	sock := filepath.Join(shortDir(t), "api.sock")
	srv, err := brapitest.New(sock, "1.19.0", "1.20.0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	p := &platform.Bottlerocket{Socket: sock, Poll: 10 * time.Millisecond, Backoff: 5 * time.Millisecond}
	c := ctx(t)
	if _, err := p.Check(c); err != nil {
		t.Fatal(err)
	}
	if err := p.Reset(c); err != nil || srv.State() != "Available" {
		t.Fatalf("reset with nothing prepared: %v, state %s", err, srv.State())
	}
	if err := p.Prepare(c); err != nil {
		t.Fatal(err)
	}
	if err := p.Perform(c); err != nil {
		t.Fatal(err)
	}
	srv.Lock(2)
	if err := p.Reset(c); err != nil || srv.State() != "Staged" {
		t.Fatalf("reset after activate: %v, state %s; want Staged", err, srv.State())
	}
	if err := p.Perform(c); err != nil || srv.State() != "Ready" {
		t.Fatalf("perform again after the reset: %v, state %s", err, srv.State())
	}
}

func TestCommandReset(t *testing.T) {
	dir := t.TempDir()
	mark := filepath.Join(dir, "reset")
	c := ctx(t)
	if err := (&platform.Command{}).Reset(c); err != nil {
		t.Errorf("no --reset-command: %v; want nothing done", err)
	}
	p := &platform.Command{ResetCmd: []string{"/bin/sh", "-c", "touch " + mark}}
	if err := p.Reset(c); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mark); err != nil {
		t.Errorf("the reset command did not run: %v", err)
	}
	bad := &platform.Command{ResetCmd: []string{"/bin/sh", "-c", "echo cannot >&2; exit 1"}}
	if err := bad.Reset(c); err == nil {
		t.Error("a failing reset command must be an error")
	}
}
