package eds

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
)

func TestCreateRunsOnePinnedPodPerNode(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.create(daemon("agent", "agent:v1"))
	h.rolledOut("agent", "agent:v1", clusterNodes)
	seen := map[string]bool{}
	for _, p := range h.pods("agent") {
		pinned := nodeOf(&corev1.Pod{Spec: corev1.PodSpec{Affinity: p.Spec.Affinity}})
		if pinned != p.Spec.NodeName || seen[pinned] {
			t.Errorf("pod %s: pinned to %q, scheduled on %q (seen before: %v)", p.Name, pinned, p.Spec.NodeName, seen[pinned])
		}
		seen[pinned] = true
		if len(p.OwnerReferences) != 1 || p.OwnerReferences[0].Kind != "ExtendedDaemonSetReplicaSet" {
			t.Errorf("pod %s: owners %v, want its ERS", p.Name, p.OwnerReferences)
		}
	}
	e := h.get("agent")
	if e.Status.ActiveReplicaSet == "" || e.Status.Desired != clusterNodes {
		t.Errorf("status %+v: want an active ERS and %d desired", e.Status, clusterNodes)
	}
	ers, err := h.eds.EdsV1alpha1().ExtendedDaemonSetReplicaSets(h.ns).Get(context.Background(), e.Status.ActiveReplicaSet, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ers.Status.Status != v1.ReplicaSetStatusActive || ers.Status.Available != clusterNodes {
		t.Errorf("active ERS status %+v", ers.Status)
	}
	m := h.ctrl.metrics
	if got := testutil.ToFloat64(m.state.WithLabelValues(h.ns, "agent", string(v1.StateRunning))); got != 1 {
		t.Errorf("slipway_eds_state{state=Running} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.pods.WithLabelValues(h.ns, "agent", ers.Name, "ready")); got != clusterNodes {
		t.Errorf("slipway_eds_pods{state=ready} = %v, want %d", got, clusterNodes)
	}
}

func TestCanaryAutoValidates(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.create(withCanary(daemon("agent", "agent:v1"), 3*time.Second))
	h.rolledOut("agent", "agent:v1", clusterNodes) // the first template needs no canary
	h.setImage("agent", "agent:v2")
	e := h.waitState("agent", v1.StateCanary, 20*time.Second)
	if e.Status.Canary == nil || len(e.Status.Canary.Nodes) != 1 {
		t.Fatalf("canary status %+v: want one node", e.Status.Canary)
	}
	p := h.canaryPod("agent", e.Status.Canary.ReplicaSet)
	if p.Spec.NodeName != e.Status.Canary.Nodes[0] {
		t.Errorf("canary pod on %s, status names %v", p.Spec.NodeName, e.Status.Canary.Nodes)
	}
	// Only the canary node runs v2 while the canary lasts.
	v2 := 0
	for _, p := range h.pods("agent") {
		if p.Spec.Containers[0].Image == "agent:v2" {
			v2++
		}
	}
	if v2 != 1 {
		t.Errorf("%d pods run v2 during the canary, want 1", v2)
	}
	h.rolledOut("agent", "agent:v2", clusterNodes)
	if ev := h.events("agent"); ev[EventCanaryStarted] == 0 || ev[EventCanaryValidated] == 0 {
		t.Errorf("events %v: want CanaryStarted and CanaryValidated", ev)
	}
}

func TestCanaryAutoPausesThenFailsOnRestarts(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.create(withCanary(daemon("agent", "agent:v1"), time.Hour))
	h.rolledOut("agent", "agent:v1", clusterNodes)
	h.setImage("agent", "agent:v2")
	e := h.waitState("agent", v1.StateCanary, 20*time.Second)
	p := h.canaryPod("agent", e.Status.Canary.ReplicaSet)
	start := time.Now()
	h.crash(p.Name, 3) // over autoPause.maxRestarts (2)
	e = h.waitState("agent", v1.StateCanaryPaused, 10*time.Second)
	t.Logf("restarts over maxRestarts to CanaryPaused: %v", time.Since(start))
	if e.Status.Reason != "Error" {
		t.Errorf("paused reason %q, want Error (the termination reason, as DataDog's)", e.Status.Reason)
	}
	seen := h.watchEDS("agent", failedOnlyWithTheTemplateRestored("agent:v1"))
	h.crash(p.Name, 6) // over autoFail.maxRestarts (5)
	// The restore is written before the state: who reads CanaryFailed reads agent:v1.
	if e := h.waitState("agent", v1.StateCanaryFailed, 10*time.Second); e.Spec.Template.Spec.Containers[0].Image != "agent:v1" {
		t.Errorf("state CanaryFailed with image %s, want agent:v1 restored", e.Spec.Template.Spec.Containers[0].Image)
	}
	if bad := seen(); len(bad) > 0 {
		t.Errorf("the watch saw the state CanaryFailed before the restore: %v", bad)
	}
	h.eventually(30*time.Second, "the canary node back on v1", func() (bool, string) {
		live := 0
		var seen []string
		for _, p := range h.pods("agent") {
			seen = append(seen, fmt.Sprintf("%s on %s deleting=%v phase=%s", p.Name, p.Spec.NodeName, p.DeletionTimestamp != nil, p.Status.Phase))
			if p.DeletionTimestamp != nil {
				continue
			}
			if p.Spec.Containers[0].Image != "agent:v1" {
				return false, p.Name + " runs " + p.Spec.Containers[0].Image
			}
			live++
		}
		return live == clusterNodes, fmt.Sprintf("pods %v; status %+v", seen, h.get("agent").Status)
	})
	if ev := h.events("agent"); ev[EventCanaryPaused] == 0 || ev[EventCanaryFailed] == 0 {
		t.Errorf("events %v: want CanaryPaused and CanaryFailed", ev)
	}
}

func TestNewNodeGetsItsPodAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	e := h.tolerate(daemon("agent", "agent:v1"))
	e.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"eds-test": h.ns}}
	e.Spec.Strategy.ReconcileFrequency = &metav1.Duration{Duration: time.Hour} // only the Node watch can react
	h.create(e)
	start := time.Now()
	node := h.addNode("late")
	h.rolledOut("agent", "agent:v1", 1)
	t.Logf("new node to running pod: %v", time.Since(start))
	// A node that stops matching loses its pod.
	patch := []byte(`{"metadata":{"labels":{"eds-test":null}}}`)
	if _, err := h.kube.CoreV1().Nodes().Patch(context.Background(), node, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually(20*time.Second, "the pod gone from the node no longer selected", func() (bool, string) {
		return len(h.pods("agent")) == 0, "pods left"
	})
}

func TestNodeAddedMidRollout(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.create(h.tolerate(manual(daemon("agent", "agent:v1"))))
	h.rolledOut("agent", "agent:v1", clusterNodes)
	h.setImage("agent", "agent:v2")
	e := h.waitState("agent", v1.StateCanary, 20*time.Second)
	node := h.addNode("mid")
	h.eventually(20*time.Second, "the new node running the active template", func() (bool, string) {
		for _, p := range h.pods("agent") {
			if p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning {
				return p.Spec.Containers[0].Image == "agent:v1", "it runs " + p.Spec.Containers[0].Image
			}
		}
		return false, "no pod there"
	})
	if got := h.get("agent"); got.Status.State != v1.StateCanary || got.Status.Canary.ReplicaSet != e.Status.Canary.ReplicaSet {
		t.Errorf("the canary changed when a node came: %+v", got.Status)
	}
	cl, _ := h.kubectlEDS("")
	if err := cl.CanaryValidate(context.Background(), "agent"); err != nil {
		t.Fatal(err)
	}
	h.rolledOut("agent", "agent:v2", clusterNodes+1)
}

func TestFailedPodsAreReplacedWithABackoff(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.create(h.tolerate(daemon("agent", "agent:v1")))
	h.rolledOut("agent", "agent:v1", clusterNodes)
	node := env.Nodes[0]
	podOn := func() *corev1.Pod {
		for _, p := range h.pods("agent") {
			if p.Spec.NodeName == node && p.DeletionTimestamp == nil {
				return &p
			}
		}
		return nil
	}
	for round, least := range []time.Duration{time.Second, 2 * time.Second} {
		failed := podOn()
		start := time.Now()
		h.patchStatus(failed.Name, map[string]any{"status": map[string]any{"phase": "Failed"}})
		h.eventually(30*time.Second, "a new pod on the node", func() (bool, string) {
			p := podOn()
			return p != nil && p.UID != failed.UID && p.Status.Phase == corev1.PodRunning, "not yet"
		})
		if took := time.Since(start); took < least*9/10 {
			t.Errorf("failure %d: replaced after %v, want a backoff of at least %v", round+1, took, least)
		}
	}
}
