package agent

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/agent/plan"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// TestFailedDrainRollsTheSwapBack: a drain that fails on a PDB that never
// allows, after the Job swapped the system directory, leaves the node
// labelled with what it runs, rolls the swap back so the next boot starts
// that version, and keeps the failure counted (Degraded at maxFailures 1).
func TestFailedDrainRollsTheSwapBack(t *testing.T) {
	f := newFleet(t, 1, func(o *Options) { o.Retry = plan.Retry{Base: time.Hour, Max: time.Hour} })
	node := f.ns + "-n0"
	f.blockEviction(t, node)
	f.start(node)
	f.channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: zeroDelay(), MaxFailures: 1,
		Drain:        &v1.DrainSpec{Timeout: &metav1.Duration{Duration: 3 * time.Second}},
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.ns}}})
	f.waitNode(t, node, "the swap staged v2 (on the cordon)", func(n *corev1.Node) bool {
		return n.Annotations[AnnotationStagedRootfsVersion] == "v2" && n.Labels[LabelRootfsVersion] == "v1"
	})
	f.waitFor("the drain to fail", time.Minute, func(ch *v1.UpdateChannel) bool { return plan.FindFailure(ch.Status, node) >= 0 })
	f.waitNode(t, node, "rolled back: v1 runs, nothing staged", func(n *corev1.Node) bool {
		return f.current(node) == "v1" && n.Labels[LabelRootfsVersion] == "v1" &&
			n.Labels[LabelStagedRootfsVersion] == "" && n.Annotations[AnnotationStagedRootfsVersion] == "" && !n.Spec.Unschedulable
	})
	if n := f.eventsWithin("RollingBack", 1, 10*time.Second); n != 1 {
		t.Errorf("%d RollingBack events, want 1", n)
	}
	// The failure stays counted: nothing prunes it as "already at target".
	f.holds("the failure counted", 6*time.Second, func(ch *v1.UpdateChannel) bool {
		return plan.FindFailure(ch.Status, node) >= 0 && ch.Status.Counts.UpToDate == 0
	})
	if !isTrue(f.get(), v1.ConditionDegraded) {
		t.Errorf("not Degraded at maxFailures 1: %+v", f.get().Status.Conditions)
	}
	// An unplanned reboot now starts v1, the version it ran.
	f.restart(node, func() { _ = os.WriteFile(f.bootFile(node), []byte("boot-unplanned"), 0o644) })
	f.waitNode(t, node, "v1 after an unplanned reboot", func(n *corev1.Node) bool {
		return n.Labels[LabelRootfsVersion] == "v1" && n.Annotations[AnnotationBootedBootID] == "boot-unplanned"
	})
}

// TestDeletedChannelRollsTheSwapBack: the channel deleted while its node
// drains (after the swap): the swap is undone and the cordon lifted.
func TestDeletedChannelRollsTheSwapBack(t *testing.T) {
	f := newFleet(t, 1, nil)
	node := f.ns + "-n0"
	f.blockEviction(t, node)
	f.start(node)
	f.channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: zeroDelay(),
		Drain:        &v1.DrainSpec{Timeout: &metav1.Duration{Duration: 4 * time.Second}},
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.ns}}})
	f.waitNode(t, node, "cordoned with v2 staged", func(n *corev1.Node) bool {
		return n.Spec.Unschedulable && n.Annotations[AnnotationStagedRootfsVersion] == "v2"
	})
	if err := f.ops.OpsV1().UpdateChannels(f.ns).Delete(context.Background(), "default", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitNode(t, node, "rolled back and uncordoned", func(n *corev1.Node) bool {
		return f.current(node) == "v1" && !n.Spec.Unschedulable && n.Labels[LabelRootfsVersion] == "v1" &&
			n.Annotations[AnnotationStagedRootfsVersion] == ""
	})
}
