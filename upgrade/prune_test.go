package upgrade_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"slipway.dev/slipway/upgrade"
	"slipway.dev/slipway/upgrade/layout"
)

// A staged release is listed by Prestaged, kept by Prune when asked, and
// removed otherwise, without touching what boots.
func TestPruneRemovesStagedReleasesNotKept(t *testing.T) {
	e := newEnv(t)
	e.run(t, "v1", layout.Rootfs, layout.Kernel)
	ctx := context.Background()
	if _, err := upgrade.Stage(ctx, e.opts("v2", layout.Rootfs, layout.Kernel)); err != nil {
		t.Fatalf("stage v2: %v", err)
	}
	if got, err := upgrade.Prestaged(e.sys); err != nil || !reflect.DeepEqual(got, []string{"v2"}) {
		t.Fatalf("Prestaged = %v, %v; want [v2]", got, err)
	}
	prune := func(keep ...string) *upgrade.PruneResult {
		t.Helper()
		res, err := upgrade.Prune(ctx, upgrade.PruneOptions{SystemDir: e.sys, LockFile: e.lock, Keep: keep})
		if err != nil {
			t.Fatalf("prune keeping %v: %v", keep, err)
		}
		return res
	}
	if res := prune("v2"); len(res.Removed) != 0 {
		t.Fatalf("prune keeping v2 removed %v", res.Removed)
	}
	res := prune()
	if want := []string{"k3os/v2", "kernel/5.15.0-v2"}; !reflect.DeepEqual(res.Removed, want) {
		t.Fatalf("prune removed %v, want %v", res.Removed, want)
	}
	for _, p := range []string{"k3os/v2", "kernel/5.15.0-v2"} {
		if _, err := os.Stat(filepath.Join(e.sys, p)); !os.IsNotExist(err) {
			t.Errorf("%s still there after the prune: %v", p, err)
		}
	}
	for c, want := range map[layout.Component]string{layout.Rootfs: "v1", layout.Kernel: "5.15.0-v1"} {
		if got := link(t, e.sys, c, "current"); got != want {
			t.Errorf("%s current = %q after the prune, want %q", c, got, want)
		}
	}
	if got, _ := upgrade.Prestaged(e.sys); len(got) != 0 {
		t.Errorf("Prestaged after the prune = %v, want none", got)
	}
	left, _ := filepath.Glob(filepath.Join(e.sys, ".slipway-staging-*"))
	if len(left) != 0 {
		t.Errorf("the prune left %v", left)
	}
}

// Current and previous are never pruned, nor folders k3os installed.
func TestPruneKeepsCurrentPreviousAndUnmarked(t *testing.T) {
	e := newEnv(t)
	e.run(t, "v1", layout.Rootfs, layout.Kernel)
	e.run(t, "v2", layout.Rootfs, layout.Kernel)
	if err := os.MkdirAll(filepath.Join(e.sys, "k3os", "v0"), 0o755); err != nil { // as k3os's own script left it
		t.Fatal(err)
	}
	res, err := upgrade.Prune(context.Background(), upgrade.PruneOptions{SystemDir: e.sys, LockFile: e.lock})
	if err != nil || len(res.Removed) != 0 {
		t.Fatalf("prune = %+v, %v; want nothing removed", res, err)
	}
}
