package eds

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
)

// ownDaemon is an ExtendedDaemonSet that runs only on the test's own nodes (addNode).
func (h *harness) ownDaemon(name, image string) *v1.ExtendedDaemonSet {
	e := h.tolerate(daemon(name, image))
	e.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"eds-test": h.ns}}
	return e
}

// Defect: a canary whose node left after one restart was never validated
// (the history entry of the gone node counted as a canary pod not Ready)
// and was rolled back at canaryTimeout. Readiness is judged on the current
// canary nodes; the history still counts for restarts.
func TestCanaryNodeThatLeavesIsNotWaitedFor(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, s := range []string{"a", "b", "c"} {
		h.addNode(s)
	}
	h.create(withCanary(h.ownDaemon("agent", "agent:v1"), 3*time.Second))
	h.rolledOut("agent", "agent:v1", 3)
	h.setImage("agent", "agent:v2")
	e := h.waitState("agent", v1.StateCanary, 20*time.Second)
	first := h.canaryPod("agent", e.Status.Canary.ReplicaSet)
	h.crash(first.Name, 1) // one restart: below autoPause.maxRestarts (2)
	h.eventually(20*time.Second, "the restart in the canary's history", func() (bool, string) {
		s, err := h.eds.EdsV1alpha1().ExtendedDaemonSetReplicaSets(h.ns).Get(context.Background(), e.Status.Canary.ReplicaSet, metav1.GetOptions{})
		return err == nil && len(s.Status.CanaryRestarts) == 1, fmt.Sprintf("%v %+v", err, s.Status.CanaryRestarts)
	})
	if err := h.kube.CoreV1().Nodes().Delete(context.Background(), first.Spec.NodeName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.rolledOut("agent", "agent:v2", 2) // another canary node, validated after 3 s; then the rollout
	if s, err := h.eds.EdsV1alpha1().ExtendedDaemonSetReplicaSets(h.ns).Get(context.Background(), e.Status.Canary.ReplicaSet, metav1.GetOptions{}); err != nil || len(s.Status.CanaryRestarts) != 1 {
		t.Errorf("the history of the gone node's pod: %v %+v, want kept", err, s)
	}
}

// Defect: canary.replicas 0 (or "0%") failed every template change at
// once with NoEligibleNode. As DataDog's, it is a canary on no node: a
// timed hold, validated by time, then the rolling update.
func TestCanaryOfZeroReplicasIsATimedHold(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, s := range []string{"a", "b"} {
		h.addNode(s)
	}
	e := withCanary(h.ownDaemon("agent", "agent:v1"), 4*time.Second)
	zero := intstr.FromString("0%")
	e.Spec.Strategy.Canary.Replicas = &zero
	h.create(e)
	h.rolledOut("agent", "agent:v1", 2)
	h.setImage("agent", "agent:v2")
	held := h.waitState("agent", v1.StateCanary, 20*time.Second)
	if held.Status.Canary == nil || len(held.Status.Canary.Nodes) != 0 {
		t.Errorf("canary %+v, want one on no node", held.Status.Canary)
	}
	time.Sleep(2 * time.Second) // within the hold: nothing replaced
	for _, p := range h.pods("agent") {
		if p.Spec.Containers[0].Image != "agent:v1" {
			t.Errorf("pod %s runs %s during the hold", p.Name, p.Spec.Containers[0].Image)
		}
	}
	if s := h.get("agent").Status; s.State != v1.StateCanary {
		t.Errorf("state %s (%s) during the hold, want Canary", s.State, s.Reason)
	}
	h.rolledOut("agent", "agent:v2", 2)
	if n := h.events("agent")[EventCanaryValidated]; n == 0 {
		t.Errorf("no %s Event after the hold", EventCanaryValidated)
	}
}
