package upgrade_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"slipway.dev/slipway/upgrade"
	"slipway.dev/slipway/upgrade/layout"
)

// Stage installs the version's folders without moving a link; Activate then
// moves previous and current without downloading anything.
func TestStageThenActivate(t *testing.T) {
	e := newEnv(t)
	e.run(t, "v1", layout.Rootfs, layout.Kernel, layout.K3s)
	ctx := context.Background()
	res, err := upgrade.Stage(ctx, e.opts("v2", layout.Rootfs, layout.Kernel, layout.K3s))
	if err != nil {
		t.Fatalf("stage v2: %v", err)
	}
	if res.AlreadyCurrent {
		t.Fatalf("stage reported nothing to do: %+v", res)
	}
	for c, want := range map[layout.Component]string{layout.Rootfs: "v1", layout.Kernel: "5.15.0-v1", layout.K3s: "v1-k3s1"} {
		if got := link(t, e.sys, c, "current"); got != want {
			t.Errorf("after stage, %s current = %q, want %q (stage must not switch)", c, got, want)
		}
	}
	for _, p := range []string{"k3os/v2/k3os", "kernel/5.15.0-v2/kernel.squashfs", "k3s/v2-k3s1/k3s"} {
		if _, err := os.Stat(filepath.Join(e.sys, p)); err != nil {
			t.Errorf("stage left no %s: %v", p, err)
		}
	}
	// Activate needs nothing from the mirror any more.
	if err := os.RemoveAll(filepath.Join(e.mirror, "v2", "k3os-rootfs-amd64.tar.gz")); err != nil {
		t.Fatal(err)
	}
	res, err = upgrade.Activate(ctx, e.opts("v2", layout.Rootfs, layout.Kernel, layout.K3s))
	if err != nil {
		t.Fatalf("activate v2: %v", err)
	}
	for _, c := range res.Components {
		if c.Action != upgrade.ActionReuse {
			t.Errorf("activate %s: action %s, want reuse", c.Component, c.Action)
		}
	}
	for c, want := range map[layout.Component][2]string{
		layout.Rootfs: {"v2", "v1"}, layout.Kernel: {"5.15.0-v2", "5.15.0-v1"}, layout.K3s: {"v2-k3s1", "v1-k3s1"},
	} {
		if cur, prev := link(t, e.sys, c, "current"), link(t, e.sys, c, "previous"); cur != want[0] || prev != want[1] {
			t.Errorf("%s current/previous = %s/%s, want %s/%s", c, cur, prev, want[0], want[1])
		}
	}
	if res, err := upgrade.Stage(ctx, e.opts("v2")); err != nil || !res.AlreadyCurrent {
		t.Errorf("stage of the current version: %+v, %v; want nothing to do", res, err)
	}
}

func TestActivateRefusesWhatIsNotStaged(t *testing.T) {
	e := newEnv(t)
	e.run(t, "v1")
	_, err := upgrade.Activate(context.Background(), e.opts("v2"))
	if !errors.Is(err, upgrade.ErrNotStaged) {
		t.Fatalf("activate of an unstaged version: %v, want ErrNotStaged", err)
	}
	if got := link(t, e.sys, layout.Rootfs, "current"); got != "v1" {
		t.Errorf("current = %q after a refused activate, want v1", got)
	}
}
