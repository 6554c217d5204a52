package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/plan"
)

// capacityHeldBy tells whether ch's CapacityHeld condition is True with
// reason, naming node.
func capacityHeldBy(ch *v1.UpdateChannel, reason, node string) bool {
	c := meta.FindStatusCondition(ch.Status.Conditions, plan.ConditionCapacityHeld)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == reason && strings.Contains(c.Message, node)
}

// eventSays waits (up to two minutes: a loaded API server answers a read
// with a timeout only after one) for an Event of reason whose message
// holds every one of says.
func eventSays(t *testing.T, f *fleettest.Fleet, reason string, says ...string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		l, err := f.Kube.CoreV1().Events(f.NS).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=" + reason})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range l.Items {
			all := true
			for _, s := range says {
				all = all && strings.Contains(e.Message, s)
			}
			if all {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s Event says %q: %+v", reason, says, l.Items)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestNotReadyWorkerSpendsTheBudget: at concurrency 1, a worker NotReady
// without a slot spends the channel's budget, as a DaemonSet's
// maxUnavailable counts it: no node starts while it is down, the
// CapacityHeld condition names it, and once it has been down longer than
// nodeReadyTimeout the condition's reason and an Event say so. Back
// Ready, the three roll one at a time.
func TestNotReadyWorkerSpendsTheBudget(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 3, nil)
	n := func(i int) string { return fmt.Sprintf("%s-n%d", f.NS, i) }
	for i := range 3 {
		f.Start(n(i))
	}
	f.AgentsUp(n(0), n(1), n(2))
	f.Fleet.SetReady(n(0), false)
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", Concurrency: 1, RebootDelay: fleettest.ZeroDelay(), NodeSelector: f.Selector(),
		NodeReadyTimeout: &metav1.Duration{Duration: 8 * time.Second}})
	f.WaitFor("CapacityHeld naming the NotReady node", time.Minute, func(ch *v1.UpdateChannel) bool { return capacityHeldBy(ch, "NodesUnavailable", n(0)) })
	f.Holds("no slot while a node is down at concurrency 1", 5*time.Second, func(ch *v1.UpdateChannel) bool { return len(ch.Status.Updating) == 0 })
	f.WaitFor("CapacityHeld turned NodeDownTooLong", time.Minute, func(ch *v1.UpdateChannel) bool { return capacityHeldBy(ch, "NodeDownTooLong", n(0)) })
	eventSays(t, f.Fleet, "NodeDownTooLong", n(0), "nodeSelector")
	if ch := f.Get(); len(ch.Status.Updating) != 0 {
		t.Fatalf("a slot was granted while %s is down: %+v", n(0), ch.Status.Updating)
	}
	f.Fleet.SetReady(n(0), true)
	f.WaitFor("all three at v2", 2*time.Minute, fleettest.Done(3))
	f.AssertAllAt("v2")
	if ch := f.WaitFor("CapacityHeld False", time.Minute, func(ch *v1.UpdateChannel) bool {
		return meta.IsStatusConditionFalse(ch.Status.Conditions, plan.ConditionCapacityHeld)
	}); ch == nil {
		t.Fatal("no channel")
	}
}

// TestWorkerDownAfterTheGrantHoldsTheDrain: at concurrency 1 a worker is
// granted its slot while all are up; another worker goes NotReady before
// its drain. The drain asks the budget again: the first keeps its slot,
// uncordoned (a CapacityHeld Event says why), and drains once the other
// is back.
func TestWorkerDownAfterTheGrantHoldsTheDrain(t *testing.T) {
	t.Parallel()
	f, first, down, releaseFirst := grantedOne(t, false)
	f.Fleet.SetReady(down, false) // after the grant, before the drain
	// The drain's check reads the controller's view of the nodes, as the
	// grant does: the Job finishes once the controller has seen the node
	// down (a node going down within the watch's delay of a cordon is not
	// seen by any reader; the servers' gate reads live).
	f.WaitFor("the controller sees "+down+" down", time.Minute, func(ch *v1.UpdateChannel) bool {
		c := meta.FindStatusCondition(ch.Status.Conditions, plan.ConditionCapacityHeld)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, down)
	})
	releaseFirst(true)
	eventSays(t, f.Fleet, "CapacityHeld", first, down, "drain")
	f.Holds("the first keeps its slot while another is down", 5*time.Second, func(ch *v1.UpdateChannel) bool {
		return len(ch.Status.Updating) == 1 && ch.Status.Updating[0].Node == first
	})
	if node := f.Node(first); node.Spec.Unschedulable || drain.CordonedBy(node.Annotations) != "" {
		t.Fatalf("%s was cordoned while %s is NotReady, concurrency 1", first, down)
	}
	f.Fleet.SetReady(down, true)
	f.WaitFor("all three at v2", 2*time.Minute, fleettest.Done(3))
	f.AssertAllAt("v2")
}
