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
	"slipway.dev/slipway/ops/protocol"
)

// Tests of the fleet view: which nodes take slots, and which are skipped.

func skippedAs(ch *v1.UpdateChannel, node, reason string) bool {
	for _, s := range ch.Status.Skipped {
		if s.Node == node && s.Reason == reason && s.Message != "" {
			return true
		}
	}
	return false
}

// TestSkippedNodesDoNotStopTheRollout: a NotReady node (its kubelet gone,
// its agent running), a node an admin cordoned and a node with no agent
// take no slot, are listed in status.skipped with why, and do not make
// the channel Degraded (maxFailures 1); the others upgrade. Once the
// NotReady node is Ready again it upgrades too.
func TestSkippedNodesDoNotStopTheRollout(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5, nil)
	n := func(i int) string { return fmt.Sprintf("%s-n%d", f.NS, i) }
	f.Fleet.SetReady(n(0), false)
	if _, err := f.Kube.CoreV1().Nodes().Patch(context.Background(), n(1), "application/merge-patch+json",
		[]byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// n2 has no agent; it looks like a node whose agent once reported v1.
	if err := f.PatchNodeAnnotation(n(2), protocol.AnnotationRootfsVersion, "v1"); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 1, 3, 4} {
		f.Start(n(i))
	}
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", Concurrency: 3, RebootDelay: fleettest.ZeroDelay(), NodeSelector: f.Selector()})
	ch := f.WaitFor("the two healthy nodes at v2 and three skipped", time.Minute, func(ch *v1.UpdateChannel) bool {
		return ch.Status.Counts.UpToDate == 2 && len(ch.Status.Updating) == 0 && ch.Status.Counts.Skipped == 3 &&
			skippedAs(ch, n(0), plan.SkipNotReady) && skippedAs(ch, n(1), plan.SkipUnschedulable) && skippedAs(ch, n(2), plan.SkipNoAgent)
	})
	if fleettest.IsTrue(ch, v1.ConditionDegraded) || len(ch.Status.Failed) != 0 || fleettest.IsTrue(ch, v1.ConditionComplete) {
		t.Errorf("skipped nodes must neither fail nor degrade, and the channel is not complete: failed %+v conditions %+v", ch.Status.Failed, ch.Status.Conditions)
	}
	for _, i := range []int{0, 1, 2} {
		if got := f.Current(n(i)); got != "v1" {
			t.Errorf("skipped node %s was upgraded to %s", n(i), got)
		}
	}
	if nd := f.Node(n(1)); !nd.Spec.Unschedulable || drain.CordonedBy(nd.Annotations) != "" {
		t.Errorf("the admin's cordon of %s must stay as the admin left it: %v %v", n(1), nd.Spec.Unschedulable, nd.Annotations)
	}
	f.Fleet.SetReady(n(0), true)
	f.WaitFor("the node Ready again upgraded and no longer skipped", time.Minute, func(ch *v1.UpdateChannel) bool {
		return ch.Status.Counts.UpToDate == 3 && len(ch.Status.Updating) == 0 && !skippedAs(ch, n(0), plan.SkipNotReady)
	})
	if got := f.Current(n(0)); got != "v2" {
		t.Errorf("%s: current %s after it was Ready again, want v2", n(0), got)
	}
}

// TestCanaryBesideDefault: the canary channel of docs/updatechannel.md,
// created beside the default channel that selects every node, reports the
// conflict (condition and Event), lists the node as skipped and never
// drives it; the default channel, the earlier one, upgrades all nodes.
func TestCanaryBesideDefault(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 3, nil)
	canaryNode := f.NS + "-n2"
	if _, err := f.Kube.CoreV1().Nodes().Patch(context.Background(), canaryNode, "application/merge-patch+json",
		[]byte(`{"metadata":{"labels":{"slipway.dev/channel":"canary"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		f.Start(fmt.Sprintf("%s-n%d", f.NS, i))
	}
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", Paused: true, RebootDelay: fleettest.ZeroDelay(), NodeSelector: f.Selector()})
	time.Sleep(1100 * time.Millisecond) // creationTimestamp has second precision: canary is the later one
	canary := &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "canary", Namespace: f.NS}, Spec: v1.UpdateChannelSpec{
		URL: "file:///unused", Version: "v3", RebootDelay: fleettest.ZeroDelay(),
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS, "slipway.dev/channel": "canary"}},
		Components:   &v1.Components{K3s: boolPtr(true)}}}
	if _, err := f.Ops.OpsV1().UpdateChannels(f.NS).Create(context.Background(), canary, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	getCanary := func() *v1.UpdateChannel {
		c, err := f.Ops.OpsV1().UpdateChannels(f.NS).Get(context.Background(), "canary", metav1.GetOptions{})
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
	if f.Events("Conflict", 1) < 1 {
		t.Error("no Conflict Event")
	}
	f.Patch(`{"spec":{"paused":false}}`)
	f.WaitFor("default upgrades all three nodes, the canary node too", 2*time.Minute, fleettest.Done(3))
	if c := getCanary(); len(c.Status.Updating) != 0 || c.Status.Counts.UpToDate != 0 {
		t.Errorf("canary drove a node of default: %+v", c.Status)
	}
	f.AssertAllAt("v2")
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
	bad := f.NS + "-n0"
	f.FailOn[bad] = true
	for i := range 3 {
		f.Start(fmt.Sprintf("%s-n%d", f.NS, i))
	}
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", Concurrency: 1, MaxFailures: 2, RebootDelay: fleettest.ZeroDelay(),
		NodeSelector: f.Selector()})
	ch := f.WaitFor("the two good nodes at v2 beside the failed one", time.Minute, func(ch *v1.UpdateChannel) bool {
		return ch.Status.Counts.UpToDate == 2 && len(ch.Status.Updating) == 0 && len(ch.Status.Failed) == 1
	})
	if ch.Status.Failed[0].Node != bad || fleettest.IsTrue(ch, v1.ConditionDegraded) {
		t.Errorf("want only %s failed and the channel not Degraded: failed %+v conditions %+v", bad, ch.Status.Failed, ch.Status.Conditions)
	}
}
