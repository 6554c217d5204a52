package updateoperator

import (
	"context"
	"strings"
	"testing"
	"time"

	"slipway.dev/slipway/ops/lease"
)

// A replica whose Lease tenure ended (it stalled past its renew deadline,
// so another replica may lead and start nodes of its own) sends no start:
// its turn fails saying why and the node stays idle. The same turn with
// the tenure not in question starts the node.
func TestStalledLeaderStartsNothing(t *testing.T) {
	f := newFleet(t, "fence", 1)
	node := f.nodes[0]
	f.patch(node, map[string]any{"metadata": map[string]any{"annotations": map[string]any{f.keys.Wanted(): string(IntentStabilize)}}})
	eventually(t, time.Minute, "the agent finds v2", func() (bool, string) {
		v := f.keys.View(f.node(node), "")
		return v.State == StateUpdateAvailable, "state " + string(v.State)
	})
	opts := f.controllerOptions(nil)
	if err := opts.defaults(); err != nil {
		t.Fatal(err)
	}
	c, err := newController(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.ev.flush()
	ctx := context.Background()

	c.tenure = &lease.Tenure{} // held once, renewed no more: ended
	err = c.sync(ctx)
	if err == nil || !strings.Contains(err.Error(), "tenure ended") {
		t.Errorf("a turn past the tenure: err %v, want the start refused for the tenure", err)
	}
	if w := f.keys.View(f.node(node), "").Wanted; w != IntentStabilize {
		t.Fatalf("a leader past its tenure started %s: wanted %s", node, w)
	}

	c.tenure = nil // no election: nothing to fence
	if err := c.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if w := f.keys.View(f.node(node), "").Wanted; w != IntentPrepare {
		t.Errorf("the same turn unfenced: %s wanted %s, want %s", node, w, IntentPrepare)
	}
}
