package platform_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"slipway.dev/slipway/ops/updateoperator/platform"
	"slipway.dev/slipway/ops/updateoperator/platform/brapitest"
	"slipway.dev/slipway/upgrade"
	"slipway.dev/slipway/upgrade/channel"
	"slipway.dev/slipway/upgrade/layout"
	"slipway.dev/slipway/upgrade/releasetest"
)

// shortDir is a temp dir whose path fits a unix socket's.
func shortDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "br")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// The whole update against the emulator, every action first refused with
// 423s: the client retries and the update goes through.
func TestBottlerocketUpdateThrough423s(t *testing.T) {
	sock := filepath.Join(shortDir(t), "api.sock")
	srv, err := brapitest.New(sock, "1.19.0", "1.20.0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	p := &platform.Bottlerocket{Socket: sock, Poll: 10 * time.Millisecond, Backoff: 5 * time.Millisecond}
	c := ctx(t)
	srv.Lock(3)
	st, err := p.Check(c)
	if err != nil || st.Current != "1.19.0" || st.Available != "1.20.0" {
		t.Fatalf("Check = %+v, %v", st, err)
	}
	for name, step := range map[string]func(context.Context) error{"prepare": p.Prepare} {
		srv.Lock(2)
		if err := step(c); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	srv.Lock(2)
	if err := p.Perform(c); err != nil {
		t.Fatalf("perform: %v", err)
	}
	if err := p.Perform(c); err != nil {
		t.Fatalf("perform again (idempotent): %v", err)
	}
	if err := p.Reboot(c); err != nil {
		t.Fatalf("reboot: %v", err)
	}
	if v, err := p.Version(c); err != nil || v != "1.20.0" {
		t.Fatalf("after reboot: version %q, %v", v, err)
	}
	if srv.Locked423 != 7 {
		t.Errorf("the emulator answered %d 423s, want 7 (all retried)", srv.Locked423)
	}
	if st, err := p.Check(c); err != nil || st.Available != "" {
		t.Errorf("Check after the update = %+v, %v; want up to date", st, err)
	}
}

func TestBottlerocketBadHost(t *testing.T) {
	dir := shortDir(t)
	missing := &platform.Bottlerocket{Socket: filepath.Join(dir, "none.sock")}
	if _, err := missing.Check(ctx(t)); err == nil || !strings.Contains(err.Error(), "--api-socket") {
		t.Errorf("missing socket: %v; want an error naming --api-socket", err)
	}
	sock := filepath.Join(dir, "api.sock")
	srv, err := brapitest.New(sock, "1.19.0", "1.20.0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srv.Garbage(true)
	p := &platform.Bottlerocket{Socket: sock}
	if _, err := p.Version(ctx(t)); err == nil || !strings.Contains(err.Error(), "not its JSON") {
		t.Errorf("garbage answer: %v; want an error saying so", err)
	}
	// A lock never released: the caller's deadline ends the retries, with a clear error.
	srv.Garbage(false)
	srv.Lock(1 << 20)
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := p.Reboot(short); err == nil || !strings.Contains(err.Error(), "423") {
		t.Errorf("lock held forever: %v; want an error naming the 423", err)
	}
}

func TestCommandPlatform(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	sh := func(script string) []string { return []string{"/bin/sh", "-c", script} }
	p := &platform.Command{
		CheckCmd:   sh("echo v2"),
		PrepareCmd: sh("echo prepared >> " + state),
		ApplyCmd:   sh("echo applied >> " + state),
		RebootCmd:  sh("echo fail-on-purpose >&2; exit 3"),
		VersionCmd: sh("echo v1"),
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	c := ctx(t)
	if st, err := p.Check(c); err != nil || st != (platform.Status{Current: "v1", Available: "v2"}) {
		t.Fatalf("Check = %+v, %v", st, err)
	}
	if err := p.Prepare(c); err != nil {
		t.Fatal(err)
	}
	if err := p.Perform(c); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(state); string(b) != "prepared\napplied\n" {
		t.Errorf("commands ran %q", b)
	}
	if err := p.Reboot(c); err == nil || !strings.Contains(err.Error(), "fail-on-purpose") {
		t.Errorf("failing reboot command: %v; want its stderr in the error", err)
	}
	if err := (&platform.Command{}).Validate(); err == nil || !strings.Contains(err.Error(), "--check-command") {
		t.Errorf("Validate of nothing: %v", err)
	}
}

// Prepare stages, perform swaps the links, and the version reported is
// what the boot runs: the old one until a new boot, then the activated
// one, or the old one again when the boot loader fell back.
func TestSlipwayPlatformStagesThenSwaps(t *testing.T) {
	sys, src, lock := slipwayAtV1(t, 5)
	c := ctx(t)
	rebooted := false
	boot := "boot-1"
	cmdline := filepath.Join(t.TempDir(), "cmdline")
	p := &platform.Slipway{SystemDir: sys, Source: src, LockFile: lock, Rebooter: rebooterFunc(func() { rebooted = true }),
		BootID: func(context.Context) (string, error) { return boot, nil }, CmdlineFile: cmdline}
	st, err := p.Check(c)
	if err != nil || st != (platform.Status{Current: "v1", Available: "v2"}) {
		t.Fatalf("Check = %+v, %v", st, err)
	}
	if err := p.Prepare(c); err != nil {
		t.Fatal(err)
	}
	if v, _ := p.Version(c); v != "v1" {
		t.Errorf("after prepare the version is %q; prepare must not switch", v)
	}
	if _, err := os.Stat(layout.New(sys).VersionDir(layout.Rootfs, "v2")); err != nil {
		t.Errorf("prepare staged nothing: %v", err)
	}
	if err := p.Perform(c); err != nil {
		t.Fatal(err)
	}
	if v, _ := p.Version(c); v != "v1" {
		t.Errorf("after perform, before a reboot, the version running is %q, want v1", v)
	}
	if st, err := p.Check(c); err != nil || st != (platform.Status{Current: "v1", Staged: "v2", Available: "v2"}) {
		t.Errorf("Check after perform = %+v, %v; want v1 running, v2 staged and available", st, err)
	}
	if err := p.Reboot(c); err != nil || !rebooted {
		t.Errorf("reboot: %v (rebooted %v)", err, rebooted)
	}
	boot = "boot-2"
	if v, _ := p.Version(c); v != "v2" {
		t.Errorf("after the reboot the version is %q, want v2", v)
	}
	// The loader fell back: it says so on the command line, whatever current says.
	boot = "boot-3"
	if err := os.WriteFile(cmdline, []byte("console=ttyS0 slipway.rootfs=v1 slipway.kernel=v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if v, _ := p.Version(c); v != "v1" {
		t.Errorf("after a fallback boot the version is %q, want v1", v)
	}
}

func fixedBoot(id string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) { return id, nil }
}

func TestRunning(t *testing.T) {
	cur := map[layout.Component]string{layout.Rootfs: "v2", layout.Kernel: "k2"}
	rec := platform.BootRecord{BootID: "b1", Versions: map[layout.Component]string{layout.Rootfs: "v1", layout.Kernel: "k1"}}
	tests := []struct {
		name      string
		rec       platform.BootRecord
		boot, cmd string
		want      map[layout.Component]string
		fresh     bool
	}{
		{"same boot: what was recorded, whatever current says", rec, "b1", "", rec.Versions, false},
		{"new boot: current", rec, "b2", "", cur, true},
		{"new boot, the loader fell back: its rootfs", rec, "b2", "v1", map[layout.Component]string{layout.Rootfs: "v1", layout.Kernel: "k2"}, true},
		{"no record: current", platform.BootRecord{}, "b1", "", cur, true},
		{"a record without a rootfs: seen anew", platform.BootRecord{BootID: "b1"}, "b1", "", cur, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, fresh := platform.Running(tc.rec, tc.boot, tc.cmd, cur)
			if !reflect.DeepEqual(got, tc.want) || fresh != tc.fresh {
				t.Errorf("Running = %v, %v; want %v, %v", got, fresh, tc.want, tc.fresh)
			}
		})
	}
}

type rebooterFunc func()

func (f rebooterFunc) Reboot(context.Context) error { f(); return nil }
func (f rebooterFunc) String() string               { return "test" }

// slipwayAtV1 is a real system directory at v1 and a mirror channel that
// offers v2 (rootfsFiles files in each rootfs): the slipway platform's
// starting point. It returns the directory, the channel and the lock file.
func slipwayAtV1(t *testing.T, rootfsFiles int) (string, channel.Source, string) {
	t.Helper()
	mirror, sys := t.TempDir(), filepath.Join(t.TempDir(), "system")
	for _, v := range []string{"v1", "v2"} {
		if _, err := releasetest.Write(releasetest.Options{Mirror: mirror, Version: v, Arch: "amd64", RootfsFiles: rootfsFiles}); err != nil {
			t.Fatal(err)
		}
	}
	src, err := channel.New(mirror, channel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(t.TempDir(), "lock")
	if _, err := upgrade.Run(ctx(t), upgrade.Options{SystemDir: sys, Source: src, Version: "v1", Arch: "amd64", LockFile: lock}); err != nil {
		t.Fatal(err)
	}
	return sys, src, lock
}

// A version command that prints nothing is an error, never an empty
// version (which the controller would take for a fallback boot).
func TestCommandVersionPrintsSomething(t *testing.T) {
	p := &platform.Command{VersionCmd: []string{"/bin/sh", "-c", "true"}}
	if v, err := p.Version(ctx(t)); err == nil || !strings.Contains(err.Error(), "printed nothing") {
		t.Errorf("Version of a silent command = %q, %v; want an error saying it printed nothing", v, err)
	}
	p.VersionCmd = []string{"/bin/sh", "-c", "printf 'v2\\nbuild 7\\n'"}
	if v, err := p.Version(ctx(t)); err != nil || v != "v2" {
		t.Errorf("Version = %q, %v; want its first line, v2", v, err)
	}
}
