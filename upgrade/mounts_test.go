package upgrade_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"slipway.dev/slipway/upgrade"
	"slipway.dev/slipway/upgrade/layout"
	"slipway.dev/slipway/upgrade/releasetest"
	"slipway.dev/slipway/upgrade/remount"
)

// tmpfsSystem mounts a tmpfs of size as the env's system directory and
// installs v1 into it. Skipped only when not root.
func tmpfsSystem(t *testing.T, e *env, size string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs; run the host tests as root")
	}
	if err := os.MkdirAll(e.sys, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", e.sys).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", e.sys).Run() })
	e.run(t, "v1")
}

func remountRO(t *testing.T, dir string) {
	t.Helper()
	if out, err := exec.Command("mount", "-o", "remount,ro", dir).CombinedOutput(); err != nil {
		t.Fatalf("remount ro: %v %s", err, out)
	}
}

func TestReadOnlyWithoutRemount(t *testing.T) {
	e := newEnv(t)
	tmpfsSystem(t, e, "24m")
	remountRO(t, e.sys)
	err := unchanged(t, e.sys, func() error {
		_, err := upgrade.Run(context.Background(), e.opts("v2"))
		return err
	})
	if !errors.Is(err, upgrade.ErrReadOnly) || upgrade.ExitCode(err) != upgrade.ExitReadOnly {
		t.Fatalf("err = %v, want ErrReadOnly", err)
	}
}

func TestRemountForTheSwap(t *testing.T) {
	e := newEnv(t)
	tmpfsSystem(t, e, "24m")
	remountRO(t, e.sys)
	o := e.opts("v2")
	o.Remount = true
	if _, err := upgrade.Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if link(t, e.sys, layout.Rootfs, "current") != "v2" {
		t.Fatal("not upgraded")
	}
	if remount.IsWritable(e.sys) {
		t.Fatal("the system directory was left read-write")
	}
	r := upgrade.RollbackOptions{SystemDir: e.sys, LockFile: e.lock}
	if _, err := upgrade.Rollback(context.Background(), r); !errors.Is(err, upgrade.ErrReadOnly) {
		t.Fatalf("rollback on a read-only dir without --remount: %v", err)
	}
	r.Remount = true
	if _, err := upgrade.Rollback(context.Background(), r); err != nil || link(t, e.sys, layout.Rootfs, "current") != "v1" {
		t.Fatalf("rollback with --remount: %v", err)
	}
	if remount.IsWritable(e.sys) {
		t.Fatal("rollback left the system directory read-write")
	}
}

// Too little space: refused before staging.
func TestFullDiskCheckedBeforeStaging(t *testing.T) {
	e := newEnv(t)
	if _, err := releasetest.Write(releasetest.Options{Mirror: e.mirror, Version: "v3", Arch: arch, RootfsBytes: 24 << 20, RootfsFiles: 8, GzipLevel: 1}); err != nil {
		t.Fatal(err)
	}
	tmpfsSystem(t, e, "24m")
	err := unchanged(t, e.sys, func() error {
		_, err := upgrade.Run(context.Background(), e.opts("v3"))
		return err
	})
	if !errors.Is(err, upgrade.ErrNoSpace) || upgrade.ExitCode(err) != upgrade.ExitNoSpace {
		t.Fatalf("err = %v, want ErrNoSpace", err)
	}
	t.Log(err)
}

// The estimate passes (the rootfs compresses 1000:1) but the disk fills
// while unpacking: the error says so and the staging folder is removed.
func TestDiskFillsWhileStaging(t *testing.T) {
	e := newEnv(t)
	zeros := filepath.Join(t.TempDir(), "zeros")
	if err := os.WriteFile(zeros, make([]byte, 40<<20), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := releasetest.Write(releasetest.Options{Mirror: e.mirror, Version: "v3", Arch: arch, K3osBinary: zeros}); err != nil {
		t.Fatal(err)
	}
	tmpfsSystem(t, e, "24m")
	err := unchanged(t, e.sys, func() error {
		_, err := upgrade.Run(context.Background(), e.opts("v3"))
		return err
	})
	if !errors.Is(err, upgrade.ErrNoSpace) {
		t.Fatalf("err = %v, want ErrNoSpace", err)
	}
	t.Log(err)
}

// With --remount, a failed upgrade still leaves the mount read-only and the
// system directory unchanged.
func TestRemountRestoredOnFailure(t *testing.T) {
	e := newEnv(t)
	tmpfsSystem(t, e, "24m")
	remountRO(t, e.sys)
	flipByte(t, e.artifact("v2", "k3os-rootfs-"+arch+".tar.gz"), 300)
	o := e.opts("v2")
	o.Remount = true
	err := unchanged(t, e.sys, func() error { _, err := upgrade.Run(context.Background(), o); return err })
	if !errors.Is(err, upgrade.ErrVerify) {
		t.Fatalf("err = %v, want ErrVerify", err)
	}
	if remount.IsWritable(e.sys) {
		t.Fatal("a failed upgrade left the system directory read-write")
	}
}
