package upgrade_test

import (
	"context"
	"errors"
	"testing"

	"slipway.dev/slipway/upgrade"
	"slipway.dev/slipway/upgrade/layout"
)

// TestRollbackFromIsIdempotent: a rollback told where it rolls back from
// (`--from`, what the agent's rollback Job passes) runs twice as the
// first run left it: a Job's pod started a second time does not swap the
// links back. A state it was not asked about is refused before a link
// changes.
func TestRollbackFromIsIdempotent(t *testing.T) {
	e := newEnv(t)
	e.run(t, "v1", layout.Rootfs, layout.Kernel)
	e.run(t, "v2", layout.Rootfs, layout.Kernel)
	r := upgrade.RollbackOptions{SystemDir: e.sys, LockFile: e.lock,
		Components: []layout.Component{layout.Rootfs, layout.Kernel},
		From:       map[layout.Component]string{layout.Rootfs: "v2", layout.Kernel: "5.15.0-v2"}}
	want := map[layout.Component][2]string{layout.Rootfs: {"v1", "v2"}, layout.Kernel: {"5.15.0-v1", "5.15.0-v2"}}
	for run := 1; run <= 2; run++ {
		res, err := upgrade.Rollback(context.Background(), r)
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		wantAction := upgrade.ActionRollback
		if run == 2 {
			wantAction = upgrade.ActionCurrent
		}
		for _, cr := range res.Components {
			if cr.Action != wantAction {
				t.Errorf("run %d: %s action %s, want %s", run, cr.Component, cr.Action, wantAction)
			}
		}
		assertLinks(t, e.sys, want)
	}

	// Half done (a crash between the two swaps): the second run finishes it.
	r.Components = []layout.Component{layout.Rootfs}
	r.From = map[layout.Component]string{layout.Rootfs: "v1"}
	if _, err := upgrade.Rollback(context.Background(), r); err != nil { // rootfs back to v2 by hand
		t.Fatal(err)
	}
	r.Components = []layout.Component{layout.Rootfs, layout.Kernel}
	r.From = map[layout.Component]string{layout.Rootfs: "v2", layout.Kernel: "5.15.0-v2"}
	if _, err := upgrade.Rollback(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	assertLinks(t, e.sys, want)

	// Asked to roll back from a version the links do not name: refused, unchanged.
	r.From = map[layout.Component]string{layout.Rootfs: "v3"}
	err := unchanged(t, e.sys, func() error { _, err := upgrade.Rollback(context.Background(), r); return err })
	if !errors.Is(err, upgrade.ErrNoRollback) {
		t.Fatalf("rollback from v3: %v, want ErrNoRollback", err)
	}
}

func assertLinks(t *testing.T, sys string, want map[layout.Component][2]string) {
	t.Helper()
	st, err := upgrade.Status(upgrade.StatusOptions{SystemDir: sys})
	if err != nil {
		t.Fatal(err)
	}
	for _, cs := range st.Components {
		if w, ok := want[cs.Component]; ok && (cs.Current != w[0] || cs.Previous != w[1]) {
			t.Errorf("%s: current %s previous %s, want %v", cs.Component, cs.Current, cs.Previous, w)
		}
	}
}

// TestRollbackOfACutSwapIsWhole: an upgrade to v2 cut between the rootfs's
// and the kernel's links (the journal left, rootfs v2, kernel still v1);
// the agent then asks to roll back the rootfs only (what differs from what
// runs), from v2. Finishing the journal first would move the kernel to v2
// and the rollback would leave rootfs v1 with kernel v2: a pair no release
// has. The cut swap is undone whole: both at v1, and a second run changes
// nothing.
func TestRollbackOfACutSwapIsWhole(t *testing.T) {
	e := newEnv(t)
	e.run(t, "v1", layout.Rootfs, layout.Kernel)
	e.run(t, "v2", layout.Rootfs, layout.Kernel)
	back := upgrade.RollbackOptions{SystemDir: e.sys, LockFile: e.lock, Components: []layout.Component{layout.Rootfs, layout.Kernel}}
	if _, err := upgrade.Rollback(context.Background(), back); err != nil { // v2 staged, v1 current
		t.Fatal(err)
	}
	l := layout.New(e.sys)
	changes := []layout.LinkChange{{Component: layout.Rootfs, Link: layout.PreviousLink, Version: "v1"}, {Component: layout.Rootfs, Link: layout.CurrentLink, Version: "v2"},
		{Component: layout.Kernel, Link: layout.PreviousLink, Version: "5.15.0-v1"}, {Component: layout.Kernel, Link: layout.CurrentLink, Version: "5.15.0-v2"}}
	func() {
		defer func() { _ = recover() }()
		_ = l.SetLinks(changes, func(ch layout.LinkChange) {
			if ch.Link == layout.CurrentLink && ch.Component == layout.Rootfs {
				panic("power loss")
			}
		})
	}()
	if cur := link(t, e.sys, layout.Kernel, "current"); cur != "5.15.0-v1" {
		t.Fatalf("the cut swap moved the kernel already: %s", cur)
	}
	r := upgrade.RollbackOptions{SystemDir: e.sys, LockFile: e.lock, Components: []layout.Component{layout.Rootfs},
		From: map[layout.Component]string{layout.Rootfs: "v2"}}
	for run := 1; run <= 2; run++ {
		if _, err := upgrade.Rollback(context.Background(), r); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		for c, want := range map[layout.Component]string{layout.Rootfs: "v1", layout.Kernel: "5.15.0-v1"} {
			if cur := link(t, e.sys, c, "current"); cur != want {
				t.Errorf("run %d: %s current = %s, want %s (one release, the cut swap undone whole)", run, c, cur, want)
			}
		}
		if pending, _ := l.PendingSwap(); pending != nil {
			t.Errorf("run %d: a journal outlived the rollback: %v", run, pending)
		}
	}
}
