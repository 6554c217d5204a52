package agent

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// A node left cordoned by a slot that went away: its agent uncordons it.

// cordonedAwaitingReboot is one node whose agent cordoned it for v2 and
// asked for a reboot that does not happen.
func cordonedAwaitingReboot(t *testing.T) (*fleet, string) {
	f := newFleet(t, 1, func(o *Options) { o.Rebooter = &stuckReboot{} })
	node := f.NS + "-n0"
	f.Start(node)
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(), NodeSelector: f.Selector()})
	f.WaitFor("the node cordoned, rebooting", time.Minute, func(ch *v1.UpdateChannel) bool {
		i := plan.FindSlot(ch.Status, node)
		return i >= 0 && ch.Status.Updating[i].Phase == plan.PhaseRebooting && drain.CordonedBy(f.Node(node).Annotations) == protocol.CordonOwner
	})
	return f, node
}

// TestInvalidSpecMidRolloutUncordons: a spec turned invalid while a node
// is cordoned, its reboot asked for but not happening, frees the slot; the
// node's agent uncordons; Invalid condition and Events say why.
func TestInvalidSpecMidRolloutUncordons(t *testing.T) {
	t.Parallel()
	f, node := cordonedAwaitingReboot(t)
	f.Patch(`{"spec":{"pollInterval":"500ms"}}`) // the schema takes it; only the agents refuse it
	ch := f.WaitFor("the slot freed", time.Minute, func(ch *v1.UpdateChannel) bool {
		return len(ch.Status.Updating) == 0 && fleettest.IsTrue(ch, v1.ConditionInvalid)
	})
	if len(ch.Status.Failed) != 0 {
		t.Errorf("an invalid spec is not the node's failure: %+v", ch.Status.Failed)
	}
	f.WaitNode(t, node, "uncordoned", func(n *corev1.Node) bool {
		return !n.Spec.Unschedulable && drain.CordonedBy(n.Annotations) == "" && n.Annotations[protocol.AnnotationDrainStarted] == ""
	})
	if f.Events("Invalid", 1) < 1 || f.Events("SlotReleased", 1) < 1 {
		t.Error("want an Invalid and a SlotReleased Event")
	}
}

// TestChannelDeletedWhileAgentAwayUncordons: the channel is deleted while
// the node, cordoned for its upgrade, reboots with its agent down; the
// agent that starts after the reboot finds no channel and uncordons.
func TestChannelDeletedWhileAgentAwayUncordons(t *testing.T) {
	t.Parallel()
	f, node := cordonedAwaitingReboot(t)
	f.Stop(node)
	if err := f.Ops.OpsV1().UpdateChannels(f.NS).Delete(context.Background(), "default", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Its Jobs go too (removed with the channel, or their day-long TTL
	// passed while the node was away): nothing names the channel any more.
	background := metav1.DeletePropagationBackground // no orphan finalizer: no garbage collector runs here
	if err := f.Kube.BatchV1().Jobs(f.NS).DeleteCollection(context.Background(), metav1.DeleteOptions{PropagationPolicy: &background}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	for { // gone for good before the agent comes back: its informer never sees the channel
		if _, err := f.Ops.OpsV1().UpdateChannels(f.NS).Get(context.Background(), "default", metav1.GetOptions{}); apierrors.IsNotFound(err) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second)
	f.Restart(node, func() { // the reboot happens while the agent is down
		if err := os.WriteFile(f.BootFile(node), []byte("boot-after"), 0o644); err != nil {
			t.Error(err)
		}
	})
	f.WaitNode(t, node, "uncordoned by its restarted agent", func(n *corev1.Node) bool {
		return !n.Spec.Unschedulable && drain.CordonedBy(n.Annotations) == ""
	})
}
