package updateoperator

import (
	"context"
	"errors"
	"testing"
	"time"

	"slipway.dev/slipway/ops/lease"
)

// A replica whose Lease tenure ended (it stalled past its renew deadline,
// so the other replica may lead and start nodes of its own) writes
// nothing: its turn fails saying why and the node stays idle. The same turn
// from a controller run without election starts the node.
func TestStalledLeaderWritesNothing(t *testing.T) {
	f := newFleet(t, "fence", 1)
	node := f.nodes[0]
	f.patch(node, map[string]any{"metadata": map[string]any{"annotations": map[string]any{f.keys.Wanted(): string(IntentStabilize)}}})
	eventually(t, time.Minute, "the agent finds v2", func() (bool, string) {
		v := f.keys.View(f.node(node), "")
		return v.State == StateUpdateAvailable, "state " + string(v.State)
	})
	ctx := context.Background()

	// Elected, but holding no tenure: as a leader is once its renew deadline passed.
	stalled := f.bareController(func(o *ControllerOptions) { o.LeaseName = "fence-update-operator" })
	if err := stalled.sync(ctx); !errors.Is(err, lease.ErrTenureEnded) {
		t.Errorf("a turn past the tenure: err %v, want %v", err, lease.ErrTenureEnded)
	}
	if w := f.keys.View(f.node(node), "").Wanted; w != IntentStabilize {
		t.Fatalf("a leader past its tenure started %s: wanted %s", node, w)
	}

	if err := f.bareController(nil).sync(ctx); err != nil {
		t.Fatal(err)
	}
	if w := f.keys.View(f.node(node), "").Wanted; w != IntentPrepare {
		t.Errorf("the same turn without election: %s wanted %s, want %s", node, w, IntentPrepare)
	}
}

// bareController is a controller of the tests' settings, edited, that is
// not run: the test calls its turns.
func (f *fleet) bareController(edit func(*ControllerOptions)) *controller {
	o := f.controllerOptions(edit)
	if err := o.defaults(); err != nil {
		f.t.Fatal(err)
	}
	c, err := newController(o)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(c.ev.flush)
	return c
}
