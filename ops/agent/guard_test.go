package agent

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// slotFor gives node a slot in the fleet's channel (written as the
// controller would: the fleet's own controller is stopped, so that the
// test alone decides the slot) and returns the channel and the slot as written.
func (f *fleet) slotFor(t *testing.T, node string, spec v1.UpdateChannelSpec) (*v1.UpdateChannel, v1.Slot) {
	t.Helper()
	f.StopController()
	spec.Paused = true
	f.Channel(spec)
	ch := f.Get()
	slot := v1.Slot{Node: node, Version: "v2", Attempt: 1, Phase: plan.PhaseUpgrading, Since: metav1.Now()}
	ch.Status.Updating = []v1.Slot{slot}
	ch, err := f.Ops.OpsV1().UpdateChannels(f.NS).UpdateStatus(context.Background(), ch, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.ShowViews(t, ch)
	return ch, ch.Status.Updating[0]
}

// freeSlots takes every slot away, as a stale-slot recovery or an invalid spec does.
func (f *fleet) freeSlots(t *testing.T) {
	t.Helper()
	ch := f.Get()
	ch.Status.Updating = nil
	ch, err := f.Ops.OpsV1().UpdateChannels(f.NS).UpdateStatus(context.Background(), ch, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.ShowViews(t, ch)
}

// TestLostSlotStopsTheDrain (issue 21 item 5): a drain under way whose
// slot is taken away (here: its channel deleted) evicts nothing more,
// although the pods it waited for become evictable, and the controller
// lifts its cordon (the node's agent is stopped: only the controller can).
func TestLostSlotStopsTheDrain(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	node := f.NS + "-n0"
	f.BlockEviction(t, node)
	f.Start(node)
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(),
		Drain: &v1.DrainSpec{Timeout: &metav1.Duration{Duration: time.Minute}}, NodeSelector: f.Selector()})
	f.WaitNode(t, node, "cordoned for the drain", func(n *corev1.Node) bool { return drain.CordonedBy(n.Annotations) == protocol.CordonOwner })
	f.Stop(node)
	ctx := context.Background()
	if err := f.Ops.OpsV1().UpdateChannels(f.NS).Delete(ctx, "default", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.WaitNode(t, node, "uncordoned by the controller", func(n *corev1.Node) bool {
		return !n.Spec.Unschedulable && drain.CordonedBy(n.Annotations) == ""
	})
	if err := f.Kube.PolicyV1().PodDisruptionBudgets(f.NS).Delete(ctx, "guarded", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		p, err := f.Kube.CoreV1().Pods(f.NS).Get(ctx, "guarded", metav1.GetOptions{})
		if err != nil || p.DeletionTimestamp != nil {
			t.Fatalf("the pod was evicted after the slot was taken away (err %v)", err)
		}
	}
}

// TestNoRebootWithoutAConfirmedSlot (issue 21 item 5): the reboot, right
// after this process drained (no confirmation on the way), still asks the
// API server for the slot at that moment and does not reboot without it.
func TestNoRebootWithoutAConfirmedSlot(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	node := f.NS + "-n0"
	ch, slot := f.slotFor(t, node, v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(), NodeSelector: f.Selector()})
	a := f.inertAgent(t, node)
	s, bad := plan.Resolve(ch.Spec)
	if bad != nil {
		t.Fatal(bad)
	}
	a.recorder = record.NewFakeRecorder(16)
	a.noteRebootFrom("boot-0", "drained") // as if this process had just drained, on the slot it held then
	f.freeSlots(t)
	err := a.stepReboot(context.Background(), &stepCtx{ch: ch, s: s, slot: slot})
	if !errors.Is(err, errSlotGone) {
		t.Errorf("the reboot on a slot taken away: %v, want errSlotGone", err)
	}
	if n := a.opts.Rebooter.(*guardedRebooter).next.(*stuckReboot).calls.Load(); n != 0 {
		t.Errorf("rebooted %d times without a slot", n)
	}
	for events := a.recorder.(*record.FakeRecorder).Events; len(events) > 0; { // a reboot never asked has not stalled
		if e := <-events; strings.Contains(e, "RebootStalled") {
			t.Errorf("event %q for a reboot the slot guard never asked", e)
		}
	}
}
