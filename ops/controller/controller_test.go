package controller

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// TestControllerHandover: the controller stops mid-rollout (after the
// node in its slot was shown the slot on its Node; drain disabled, which
// would need the controller); that node finishes and reports its success on its own Node, and the slot
// stays in the channel's status (no agent writes it); a controller started
// again folds the report in from what the API holds and finishes the
// rollout. Every node's slot work is held until the controller is gone:
// a node quick enough to finish before the stop lands would otherwise
// see its slot freed and the next granted by a controller still running.
func TestControllerHandover(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 3, nil)
	var release []func(ok bool)
	for i := range 3 {
		node := fmt.Sprintf("%s-n%d", f.NS, i)
		release = append(release, f.HoldJobs(node))
		f.Start(node)
	}
	off := false // the drain is the controller's: without one the node goes on alone
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", Concurrency: 1, RebootDelay: fleettest.ZeroDelay(), NodeSelector: f.Selector(),
		Drain: &v1.DrainSpec{Enabled: &off}})
	ch := f.WaitFor("a slot granted", time.Minute, func(ch *v1.UpdateChannel) bool { return len(ch.Status.Updating) == 1 })
	slot := ch.Status.Updating[0]
	f.WaitAgentSees(t, slot.Node, "shown its slot (its channel view)", func(views map[types.UID]protocol.View, _ protocol.Reports) bool {
		v, ok := views[ch.UID]
		return ok && v.Slot != nil && plan.SameSlot(*v.Slot, slot)
	})
	f.StopController()
	for _, r := range release {
		r(true) // the held slot runs now, the others when they come
	}
	f.WaitAgentSees(t, slot.Node, "reporting its success without the controller", func(_ map[types.UID]protocol.View, r protocol.Reports) bool {
		return r[ch.UID].Outcome == protocol.OutcomeSucceeded
	})
	if ch := f.Get(); plan.FindSlot(ch.Status, slot.Node) < 0 {
		t.Fatalf("the slot of %s left the status with no controller running: %+v", slot.Node, ch.Status.Updating)
	}
	f.StartController()
	f.WaitFor("every node at v2 after the handover", 2*time.Minute, fleettest.Done(3))
	f.AssertAllAt("v2")
}
