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
	"slipway.dev/slipway/upgrade/remount"
)

func mountCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
		t.Fatalf("mount %v: %v %s", args, err, out)
	}
}

// TestRemountReadOnlyBindAsInAJob: stock k3os mounts its system directory
// as a read-only bind of a writable partition, and the upgrade Job sees it
// through one more bind (its hostPath). `ops upgrade --remount` makes only
// the Job's own mount writable for the swap and read-only again after;
// without --remount it exits with the read-only code.
func TestRemountReadOnlyBindAsInAJob(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make bind mounts; run the host tests as root")
	}
	e := newEnv(t)
	state := t.TempDir() // the writable state partition
	mountCmd(t, "-t", "tmpfs", "-o", "size=24m", "tmpfs", state)
	t.Cleanup(func() { _ = exec.Command("umount", "-l", state).Run() })
	if err := os.MkdirAll(filepath.Join(state, "k3os", "system"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(e.sys, 0o755); err != nil {
		t.Fatal(err)
	}
	mountCmd(t, "--bind", filepath.Join(state, "k3os", "system"), e.sys) // the host's /k3os/system
	t.Cleanup(func() { _ = exec.Command("umount", "-l", e.sys).Run() })
	e.run(t, "v1")
	mountCmd(t, "-o", "remount,bind,ro", e.sys)
	job := filepath.Join(t.TempDir(), "k3os-system") // the Job's hostPath mount of it
	if err := os.MkdirAll(job, 0o755); err != nil {
		t.Fatal(err)
	}
	mountCmd(t, "--bind", e.sys, job)
	t.Cleanup(func() { _ = exec.Command("umount", "-l", job).Run() })
	mountCmd(t, "-o", "remount,bind,ro", job)

	o := e.opts("v2")
	o.SystemDir = job
	if _, err := upgrade.Run(context.Background(), o); !errors.Is(err, upgrade.ErrReadOnly) {
		t.Fatalf("without --remount: err = %v, want ErrReadOnly", err)
	}
	o.Remount = true
	if _, err := upgrade.Run(context.Background(), o); err != nil {
		t.Fatalf("with --remount: %v", err)
	}
	if got := link(t, filepath.Join(state, "k3os", "system"), layout.Rootfs, "current"); got != "v2" {
		t.Fatalf("the partition's current is %s, want v2", got)
	}
	if remount.IsWritable(job) || remount.IsWritable(e.sys) {
		t.Fatal("a system directory mount was left read-write")
	}
}
