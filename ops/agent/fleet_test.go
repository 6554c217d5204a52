package agent

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// Tests of the fleet view: which nodes take slots, and which are skipped.

// heartbeat writes node's agent heartbeat as if its agent just reported.
func (f *fleet) heartbeat(node string) {
	f.t.Helper()
	now, secs := metav1.NewMicroTime(time.Now()), int32(180)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: protocol.AgentLeaseName(node), Namespace: f.ns},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &node, LeaseDurationSeconds: &secs, RenewTime: &now}}
	if _, err := f.kube.CoordinationV1().Leases(f.ns).Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

// setReady sets node's Ready condition.
func (f *fleet) setReady(node string, ready bool) {
	f.t.Helper()
	ctx := context.Background()
	n, err := f.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	status, reason := corev1.ConditionTrue, "KubeletReady"
	if !ready {
		status, reason = corev1.ConditionUnknown, "NodeStatusUnknown"
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: reason,
		LastTransitionTime: metav1.Now(), LastHeartbeatTime: metav1.Now()}}
	if _, err := f.kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fleet) node(name string) *corev1.Node {
	f.t.Helper()
	n, err := f.kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

func skippedAs(ch *v1.UpdateChannel, node, reason string) bool {
	for _, s := range ch.Status.Skipped {
		if s.Node == node && s.Reason == reason && s.Message != "" {
			return true
		}
	}
	return false
}

func selectFleet(f *fleet) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.ns}}
}

// TestSkippedNodesDoNotStopTheRollout: a NotReady node (its kubelet gone,
// its agent running), a node an admin cordoned and a node with no agent
// take no slot, are listed in status.skipped with why, and do not make
// the channel Degraded (maxFailures 1); the others upgrade. Once the
// NotReady node is Ready again it upgrades too.
func TestSkippedNodesDoNotStopTheRollout(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5, nil)
	n := func(i int) string { return fmt.Sprintf("%s-n%d", f.ns, i) }
	f.setReady(n(0), false)
	if _, err := f.kube.CoreV1().Nodes().Patch(context.Background(), n(1), "application/merge-patch+json",
		[]byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// n2 has no agent; it looks like a node whose agent once reported v1.
	if err := f.patchNodeAnnotation(n(2), protocol.AnnotationRootfsVersion, "v1"); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 1, 3, 4} {
		f.start(n(i))
	}
	f.channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", Concurrency: 3, RebootDelay: zeroDelay(), NodeSelector: selectFleet(f)})
	ch := f.waitFor("the two healthy nodes at v2 and three skipped", time.Minute, func(ch *v1.UpdateChannel) bool {
		return ch.Status.Counts.UpToDate == 2 && len(ch.Status.Updating) == 0 && ch.Status.Counts.Skipped == 3 &&
			skippedAs(ch, n(0), plan.SkipNotReady) && skippedAs(ch, n(1), plan.SkipUnschedulable) && skippedAs(ch, n(2), plan.SkipNoAgent)
	})
	if isTrue(ch, v1.ConditionDegraded) || len(ch.Status.Failed) != 0 || isTrue(ch, v1.ConditionComplete) {
		t.Errorf("skipped nodes must neither fail nor degrade, and the channel is not complete: failed %+v conditions %+v", ch.Status.Failed, ch.Status.Conditions)
	}
	for _, i := range []int{0, 1, 2} {
		if got := f.current(n(i)); got != "v1" {
			t.Errorf("skipped node %s was upgraded to %s", n(i), got)
		}
	}
	if nd := f.node(n(1)); !nd.Spec.Unschedulable || drain.CordonedBy(nd.Annotations) != "" {
		t.Errorf("the admin's cordon of %s must stay as the admin left it: %v %v", n(1), nd.Spec.Unschedulable, nd.Annotations)
	}
	f.setReady(n(0), true)
	f.waitFor("the node Ready again upgraded and no longer skipped", time.Minute, func(ch *v1.UpdateChannel) bool {
		return ch.Status.Counts.UpToDate == 3 && len(ch.Status.Updating) == 0 && !skippedAs(ch, n(0), plan.SkipNotReady)
	})
	if got := f.current(n(0)); got != "v2" {
		t.Errorf("%s: current %s after it was Ready again, want v2", n(0), got)
	}
}

// cordonedAwaitingReboot is one node whose agent cordoned it for v2 and
// asked for a reboot that does not happen.
func cordonedAwaitingReboot(t *testing.T) (*fleet, string) {
	f := newFleet(t, 1, func(o *Options) { o.Rebooter = &stuckReboot{} })
	node := f.ns + "-n0"
	f.start(node)
	f.channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: zeroDelay(), NodeSelector: selectFleet(f)})
	f.waitFor("the node cordoned, rebooting", time.Minute, func(ch *v1.UpdateChannel) bool {
		i := plan.FindSlot(ch.Status, node)
		return i >= 0 && ch.Status.Updating[i].Phase == plan.PhaseRebooting && drain.CordonedBy(f.node(node).Annotations) == protocol.CordonOwner
	})
	return f, node
}

// TestInvalidSpecMidRolloutUncordons: a spec turned invalid while a node
// is cordoned, its reboot asked for but not happening, frees the slot; the
// node's agent uncordons; Invalid condition and Events say why.
func TestInvalidSpecMidRolloutUncordons(t *testing.T) {
	t.Parallel()
	f, node := cordonedAwaitingReboot(t)
	f.patch(`{"spec":{"pollInterval":"500ms"}}`) // the schema takes it; only the agents refuse it
	ch := f.waitFor("the slot freed", time.Minute, func(ch *v1.UpdateChannel) bool {
		return len(ch.Status.Updating) == 0 && isTrue(ch, v1.ConditionInvalid)
	})
	if len(ch.Status.Failed) != 0 {
		t.Errorf("an invalid spec is not the node's failure: %+v", ch.Status.Failed)
	}
	f.waitNode(t, node, "uncordoned", func(n *corev1.Node) bool {
		return !n.Spec.Unschedulable && drain.CordonedBy(n.Annotations) == "" && n.Annotations[protocol.AnnotationDrainStarted] == ""
	})
	if f.events("Invalid", 1) < 1 || f.events("SlotReleased", 1) < 1 {
		t.Error("want an Invalid and a SlotReleased Event")
	}
}

// TestChannelDeletedWhileAgentAwayUncordons: the channel is deleted while
// the node, cordoned for its upgrade, reboots with its agent down; the
// agent that starts after the reboot finds no channel and uncordons.
func TestChannelDeletedWhileAgentAwayUncordons(t *testing.T) {
	t.Parallel()
	f, node := cordonedAwaitingReboot(t)
	f.stop(node)
	if err := f.ops.OpsV1().UpdateChannels(f.ns).Delete(context.Background(), "default", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Its Jobs go too (removed with the channel, or their day-long TTL
	// passed while the node was away): nothing names the channel any more.
	background := metav1.DeletePropagationBackground // no orphan finalizer: no garbage collector runs here
	if err := f.kube.BatchV1().Jobs(f.ns).DeleteCollection(context.Background(), metav1.DeleteOptions{PropagationPolicy: &background}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	for { // gone for good before the agent comes back: its informer never sees the channel
		if _, err := f.ops.OpsV1().UpdateChannels(f.ns).Get(context.Background(), "default", metav1.GetOptions{}); apierrors.IsNotFound(err) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second)
	f.restart(node, func() { // the reboot happens while the agent is down
		if err := os.WriteFile(f.bootFile(node), []byte("boot-after"), 0o644); err != nil {
			t.Error(err)
		}
	})
	f.waitNode(t, node, "uncordoned by its restarted agent", func(n *corev1.Node) bool {
		return !n.Spec.Unschedulable && drain.CordonedBy(n.Annotations) == ""
	})
}

// TestCanaryBesideDefault: the canary channel of docs/updatechannel.md,
// created beside the default channel that selects every node, reports the
// conflict (condition and Event), lists the node as skipped and never
// drives it; the default channel, the earlier one, upgrades all nodes.
func TestCanaryBesideDefault(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 3, nil)
	canaryNode := f.ns + "-n2"
	if _, err := f.kube.CoreV1().Nodes().Patch(context.Background(), canaryNode, "application/merge-patch+json",
		[]byte(`{"metadata":{"labels":{"slipway.dev/channel":"canary"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		f.start(fmt.Sprintf("%s-n%d", f.ns, i))
	}
	f.channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", Paused: true, RebootDelay: zeroDelay(), NodeSelector: selectFleet(f)})
	time.Sleep(1100 * time.Millisecond) // creationTimestamp has second precision: canary is the later one
	canary := &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "canary", Namespace: f.ns}, Spec: v1.UpdateChannelSpec{
		URL: "file:///unused", Version: "v3", RebootDelay: zeroDelay(),
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.ns, "slipway.dev/channel": "canary"}},
		Components:   &v1.Components{K3s: boolPtr(true)}}}
	if _, err := f.ops.OpsV1().UpdateChannels(f.ns).Create(context.Background(), canary, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	getCanary := func() *v1.UpdateChannel {
		c, err := f.ops.OpsV1().UpdateChannels(f.ns).Get(context.Background(), "canary", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	deadline := time.Now().Add(time.Minute)
	for c := getCanary(); !meta.IsStatusConditionTrue(c.Status.Conditions, plan.ConditionConflict); c = getCanary() {
		if time.Now().After(deadline) {
			t.Fatalf("canary never reported the conflict: %+v", c.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
	c := getCanary()
	if !skippedAs(c, canaryNode, plan.SkipOtherChannel) || len(c.Status.Updating) != 0 || c.Status.Counts.Nodes != 0 {
		t.Errorf("canary must skip %s and count no node: %+v", canaryNode, c.Status)
	}
	if msg := meta.FindStatusCondition(c.Status.Conditions, plan.ConditionConflict).Message; !strings.Contains(msg, "default") {
		t.Errorf("the Conflict condition must name the earlier channel: %q", msg)
	}
	if f.events("Conflict", 1) < 1 {
		t.Error("no Conflict Event")
	}
	f.patch(`{"spec":{"paused":false}}`)
	f.waitFor("default upgrades all three nodes, the canary node too", 2*time.Minute, done(3))
	if c := getCanary(); len(c.Status.Updating) != 0 || c.Status.Counts.UpToDate != 0 {
		t.Errorf("canary drove a node of default: %+v", c.Status)
	}
	f.assertAllAt("v2")
}

func boolPtr(b bool) *bool { return &b }

// TestFailedNodeInBackoffDoesNotHoldTheSlots: a node whose upgrade failed
// waits out its backoff (an hour) while the others take the free slot in
// turn (maxFailures 2, concurrency 1). The fleet view once checked the
// failed node first, counted it toward the free slot and checked no other
// node, so nothing started until the backoff ended.
func TestFailedNodeInBackoffDoesNotHoldTheSlots(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 3, func(o *Options) { o.Retry = plan.Retry{Base: time.Hour, Max: time.Hour} })
	bad := f.ns + "-n0"
	f.failOn[bad] = true
	for i := range 3 {
		f.start(fmt.Sprintf("%s-n%d", f.ns, i))
	}
	f.channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", Concurrency: 1, MaxFailures: 2, RebootDelay: zeroDelay(),
		NodeSelector: selectFleet(f)})
	ch := f.waitFor("the two good nodes at v2 beside the failed one", time.Minute, func(ch *v1.UpdateChannel) bool {
		return ch.Status.Counts.UpToDate == 2 && len(ch.Status.Updating) == 0 && len(ch.Status.Failed) == 1
	})
	if ch.Status.Failed[0].Node != bad || isTrue(ch, v1.ConditionDegraded) {
		t.Errorf("want only %s failed and the channel not Degraded: failed %+v conditions %+v", bad, ch.Status.Failed, ch.Status.Conditions)
	}
}
