package eds

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/eds/plan"
)

// Issue 24 item 3: an ERS whose owner label was removed
// (`kubectl label ers ... eds.slipway.dev/owner-`) is still the EDS's (by
// its owner reference): the controller neither crashes nor stops, gives the
// label back and keeps running a pod on every node.
func TestERSWithoutItsOwnerLabel(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.create(daemon("agent", "agent:v1"))
	h.rolledOut("agent", "agent:v1", clusterNodes)
	ctx := context.Background()
	ers := h.get("agent").Status.ActiveReplicaSet
	unlabel := []byte(`{"metadata":{"labels":{"` + v1.LabelEDSOwner + `":null}}}`)
	if _, err := h.eds.EdsV1alpha1().ExtendedDaemonSetReplicaSets(h.ns).Patch(ctx, ers, types.MergePatchType, unlabel, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	victim := h.pods("agent")[0]
	if err := h.kube.CoreV1().Pods(h.ns).Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually(30*time.Second, "a new pod on "+victim.Spec.NodeName+" and the label back", func() (bool, string) {
		s, err := h.eds.EdsV1alpha1().ExtendedDaemonSetReplicaSets(h.ns).Get(ctx, ers, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range h.pods("agent") {
			if p.Spec.NodeName == victim.Spec.NodeName && p.UID != victim.UID && p.DeletionTimestamp == nil {
				return s.Labels[v1.LabelEDSOwner] == "agent", "ERS labels " + fmt.Sprint(s.Labels)
			}
		}
		return false, "no new pod"
	})
	h.rolledOut("agent", "agent:v1", clusterNodes)
}

// manualKeys are the manual canary annotations present on name.
func (h *harness) manualKeys(name string) []string {
	h.t.Helper()
	var out []string
	for k := range h.get(name).Annotations {
		for _, m := range v1.ManualCanaryAnnotations {
			if k == m || k == v1.DataDog(m) {
				out = append(out, k)
			}
		}
	}
	return out
}

func (h *harness) noManualKeys(name string) {
	h.t.Helper()
	h.eventually(20*time.Second, "the manual canary annotations removed", func() (bool, string) {
		keys := h.manualKeys(name)
		return len(keys) == 0, fmt.Sprint(keys)
	})
}

// Issue 24 item 4: a manual decision (pause, unpause, fail, validate)
// belongs to the canary it was made for and ends with it. ERS names are
// the template's hash, so an annotation left behind would decide the next
// canary of the same template (fail it at once, start it paused, skip it)
// or of any template (no auto-pause after an unpause).
func TestManualDecisionsEndWithTheirCanary(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.create(manual(daemon("agent", "agent:v1")))
	h.rolledOut("agent", "agent:v1", clusterNodes)
	cl, _ := h.kubectlEDS("")
	ctx := context.Background()

	// Paused, then failed: the same template applied again is a new
	// canary, neither failed nor paused.
	h.setImage("agent", "agent:v2")
	h.waitState("agent", v1.StateCanary, 20*time.Second)
	if err := cl.CanaryPause(ctx, "agent", "Looking"); err != nil {
		t.Fatal(err)
	}
	h.waitState("agent", v1.StateCanaryPaused, 10*time.Second)
	if err := cl.CanaryFail(ctx, "agent"); err != nil {
		t.Fatal(err)
	}
	h.rolledOutState("agent", "agent:v1", clusterNodes, v1.StateCanaryFailed)
	h.noManualKeys("agent")
	h.setImage("agent", "agent:v2")
	e := h.waitState("agent", v1.StateCanary, 20*time.Second)
	h.canaryPod("agent", e.Status.Canary.ReplicaSet)
	if got := h.get("agent").Status; got.State != v1.StateCanary {
		t.Fatalf("the failed template applied again: state %s (%s), want a new Canary", got.State, got.Reason)
	}

	// Unpaused, then validated: the next canary pauses on restarts again.
	if err := cl.CanaryUnpause(ctx, "agent"); err != nil {
		t.Fatal(err)
	}
	if err := cl.CanaryValidate(ctx, "agent"); err != nil {
		t.Fatal(err)
	}
	h.rolledOut("agent", "agent:v2", clusterNodes)
	h.noManualKeys("agent")
	h.setImage("agent", "agent:v3")
	e = h.waitState("agent", v1.StateCanary, 20*time.Second)
	p := h.canaryPod("agent", e.Status.Canary.ReplicaSet)
	h.crash(p.Name, 3) // over autoPause.maxRestarts (2)
	if e = h.waitState("agent", v1.StateCanaryPaused, 10*time.Second); e.Status.Reason != "Error" {
		t.Errorf("paused reason %q, want Error (the termination reason, as DataDog's)", e.Status.Reason)
	}
}

// Issue 24 item 5: a canary's restart history belongs to the canary.
// Deleting the paused, crash-looping canary pod does not unpause the
// canary (its replacement has zero restarts), and the replacement's own
// restarts add to its predecessor's: 3 + 3 is over autoFail.maxRestarts (5).
func TestCanaryRestartsOutliveItsPods(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.create(withCanary(daemon("agent", "agent:v1"), time.Hour))
	h.rolledOut("agent", "agent:v1", clusterNodes)
	h.setImage("agent", "agent:v2")
	e := h.waitState("agent", v1.StateCanary, 20*time.Second)
	first := h.canaryPod("agent", e.Status.Canary.ReplicaSet)
	h.crash(first.Name, 3) // over autoPause.maxRestarts (2)
	h.waitState("agent", v1.StateCanaryPaused, 10*time.Second)
	ctx := context.Background()
	if err := h.kube.CoreV1().Pods(h.ns).Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var next corev1.Pod
	h.eventually(30*time.Second, "the replacement canary pod Ready and counted", func() (bool, string) {
		next = h.canaryPod("agent", e.Status.Canary.ReplicaSet)
		st := h.get("agent").Status
		return next.UID != first.UID && podReady(&next) && st.Ready == clusterNodes && st.Current == clusterNodes,
			fmt.Sprintf("pod %s ready %v; status %+v", next.Name, podReady(&next), st)
	})
	if st := h.get("agent").Status; st.State != v1.StateCanaryPaused {
		t.Fatalf("state %s (%s) once the crashing canary pod was replaced, want CanaryPaused", st.State, st.Reason)
	}
	h.crash(next.Name, 3)
	if got := h.waitState("agent", v1.StateCanaryFailed, 10*time.Second); got.Status.Reason != "Error" {
		t.Errorf("failed reason %q, want Error (the termination reason, as DataDog's)", got.Status.Reason)
	}
}

// Issue 24 item 1: each ERS's pods follow their own template until the
// rollout replaces them. A canary whose template selects no node (a
// nodeSelector typo) removes no active pod; once validated, the removals
// it brings wait while the rolling update is paused.
func TestPlacementFollowsEachTemplate(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.create(manual(daemon("agent", "agent:v1")))
	h.rolledOut("agent", "agent:v1", clusterNodes)
	ctx := context.Background()
	typo := []byte(`{"spec":{"template":{"spec":{"nodeSelector":{"eds-typo":"nowhere"}}}}}`)
	if _, err := h.eds.EdsV1alpha1().ExtendedDaemonSets(h.ns).Patch(ctx, "agent", types.MergePatchType, typo, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitState("agent", v1.StateCanary, 20*time.Second)
	live := func() int {
		n := 0
		for _, p := range h.pods("agent") {
			if p.DeletionTimestamp == nil {
				n++
			}
		}
		return n
	}
	if n := live(); n != clusterNodes {
		t.Fatalf("%d live pods once the canary of a template that selects no node started, want the %d active ones", n, clusterNodes)
	}
	cl, _ := h.kubectlEDS("")
	if err := cl.SetFlag(ctx, "agent", v1.AnnotationRollingUpdatePaused, true, "paused"); err != nil {
		t.Fatal(err)
	}
	if err := cl.CanaryValidate(ctx, "agent"); err != nil {
		t.Fatal(err)
	}
	h.eventually(20*time.Second, "the template validated, the rolling update paused", func() (bool, string) {
		st := h.get("agent").Status
		return st.Canary == nil && st.State == v1.StateRollingUpdatePaused && st.Desired == 0, fmt.Sprintf("%+v", st)
	})
	if n := live(); n != clusterNodes {
		t.Fatalf("%d live pods while the rolling update is paused, want %d: removals wait too", n, clusterNodes)
	}
	if err := cl.SetFlag(ctx, "agent", v1.AnnotationRollingUpdatePaused, false, "unpaused"); err != nil {
		t.Fatal(err)
	}
	h.eventually(30*time.Second, "the pods gone from the nodes the template no longer selects", func() (bool, string) {
		return len(h.pods("agent")) == 0, fmt.Sprintf("%d pods", len(h.pods("agent")))
	})
}

// Issue 24 item 10: pods the API server refuses (here a quota of two pods)
// do not freeze the status of the ExtendedDaemonSet, even a new one: it
// says what exists and ReconcileError says why no more; once the quota is
// gone the rollout completes and the condition clears.
func TestRefusedPodsDoNotFreezeTheStatus(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "two-pods"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("2")}}}
	if _, err := h.kube.CoreV1().ResourceQuotas(h.ns).Create(ctx, quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually(30*time.Second, "the quota in force", func() (bool, string) {
		q, err := h.kube.CoreV1().ResourceQuotas(h.ns).Get(ctx, "two-pods", metav1.GetOptions{})
		return err == nil && q.Status.Hard.Pods().Value() == 2, "no status yet"
	})
	h.create(daemon("agent", "agent:v1"))
	h.eventually(30*time.Second, "a status with the refusal", func() (bool, string) {
		st := h.get("agent").Status
		cond := meta.FindStatusCondition(st.Conditions, v1.ConditionReconcileError)
		return st.Desired == clusterNodes && st.Current == 2 && cond != nil && cond.Status == metav1.ConditionTrue &&
			strings.Contains(cond.Message, "quota"), fmt.Sprintf("%+v", st)
	})
	if err := h.kube.CoreV1().ResourceQuotas(h.ns).Delete(ctx, "two-pods", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.rolledOut("agent", "agent:v1", clusterNodes)
	h.eventually(10*time.Second, "ReconcileError cleared", func() (bool, string) {
		cond := meta.FindStatusCondition(h.get("agent").Status.Conditions, v1.ConditionReconcileError)
		return cond != nil && cond.Status == metav1.ConditionFalse, fmt.Sprintf("%+v", cond)
	})
}

// Issue 24 item 2: an ExtendedDaemonSet the API server accepts but the
// controller cannot decode (a duration past Go's range passes the schema's
// pattern) is marked on that object alone, condition Invalid reason
// Undecodable and an Event, while another ExtendedDaemonSet rolls out; it
// was there before the controller started (a failed list stopped the
// start), and once fixed it rolls out too.
func TestUndecodableObjectIsMarkedAlone(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t)
	ctx := context.Background()
	rc := h.eds.EdsV1alpha1().RESTClient()
	bad := []byte(`{"apiVersion":"eds.slipway.dev/v1alpha1","kind":"ExtendedDaemonSet","metadata":{"name":"bad"},"spec":{"strategy":{"reconcileFrequency":"9999999999999999h"},` +
		`"template":{"metadata":{"labels":{"app":"bad"}},"spec":{"containers":[{"name":"daemon","image":"agent:v1"}]}}}}`)
	if err := rc.Post().Namespace(h.ns).Resource("extendeddaemonsets").Body(bad).SetHeader("Content-Type", "application/json").Do(ctx).Error(); err != nil {
		t.Fatal(err)
	}
	h.startController(Options{Config: env.Config})
	h.create(daemon("good", "agent:v1"))
	h.rolledOut("good", "agent:v1", clusterNodes)
	h.eventually(30*time.Second, "bad marked Invalid/Undecodable with an Event", func() (bool, string) {
		raw, err := rc.Get().Namespace(h.ns).Resource("extendeddaemonsets").Name("bad").Do(ctx).Raw()
		if err != nil {
			return false, err.Error()
		}
		var got struct {
			Status struct{ Conditions []metav1.Condition } `json:"status"`
		}
		if err := json.Unmarshal(raw, &got); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionInvalid)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != "Undecodable" || !strings.Contains(c.Message, `spec.strategy: time: invalid duration "9999999999999999h"`) {
			return false, fmt.Sprintf("conditions %+v", got.Status.Conditions)
		}
		return h.events("bad")[EventUndecodable] > 0, fmt.Sprint(h.events("bad"))
	})
	if n := len(h.pods("bad")); n != 0 {
		t.Fatalf("%d pods of the undecodable ExtendedDaemonSet", n)
	}
	fix := []byte(`{"spec":{"strategy":{"reconcileFrequency":"10s"}}}`)
	if _, err := h.eds.EdsV1alpha1().ExtendedDaemonSets(h.ns).Patch(ctx, "bad", types.MergePatchType, fix, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	h.rolledOut("bad", "agent:v1", clusterNodes)
}

// Issue 24 item 13: a pod stuck Terminating (its node's kubelet gone: a
// finalizer plays it here) counts under maxPodSchedulerFailure once its
// grace period is over, as DataDog's; it used to hold maxUnavailable and
// stall the rollout on every other node.
func TestPodStuckTerminatingDoesNotStallTheRollout(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	e := daemon("agent", "agent:v1")
	one := intstr.FromInt32(1)
	e.Spec.Strategy.RollingUpdate.MaxUnavailable, e.Spec.Strategy.RollingUpdate.MaxPodSchedulerFailure = &one, &one
	h.create(e)
	h.rolledOut("agent", "agent:v1", clusterNodes)
	ctx := context.Background()
	stuck := h.pods("agent")[0]
	hold := []byte(`{"metadata":{"finalizers":["test.slipway.dev/dead-kubelet"]}}`)
	if _, err := h.kube.CoreV1().Pods(h.ns).Patch(ctx, stuck.Name, types.MergePatchType, hold, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		release := []byte(`{"metadata":{"finalizers":null}}`)
		_, _ = h.kube.CoreV1().Pods(h.ns).Patch(context.Background(), stuck.Name, types.MergePatchType, release, metav1.PatchOptions{})
	})
	zero := int64(0)
	if err := h.kube.CoreV1().Pods(h.ns).Delete(ctx, stuck.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	h.setImage("agent", "agent:v2")
	h.eventually(60*time.Second, "agent:v2 Ready on every node but the dead one", func() (bool, string) {
		n := 0
		for _, p := range h.pods("agent") {
			if p.Spec.Containers[0].Image == "agent:v2" && p.DeletionTimestamp == nil && p.Spec.NodeName != stuck.Spec.NodeName && plan.Available(&p, 0, time.Now()) {
				n++
			}
		}
		return n == clusterNodes-1, fmt.Sprintf("%d of %d; status %+v", n, clusterNodes-1, h.get("agent").Status)
	})
}

// Defect: kubectl eds get failed for a whole namespace when one
// ExtendedDaemonSet in it could not be decoded; the controller copes, the
// plugin prints that one as invalid, with why, beside the others.
func TestKubectlEDSGetShowsAnUndecodableOneAsInvalid(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	rc := h.eds.EdsV1alpha1().RESTClient()
	bad := []byte(`{"apiVersion":"eds.slipway.dev/v1alpha1","kind":"ExtendedDaemonSet","metadata":{"name":"bad"},"spec":{"strategy":{"reconcileFrequency":"9999999999999999h"},` +
		`"template":{"metadata":{"labels":{"app":"bad"}},"spec":{"containers":[{"name":"daemon","image":"agent:v1"}]}}}}`)
	if err := rc.Post().Namespace(h.ns).Resource("extendeddaemonsets").Body(bad).SetHeader("Content-Type", "application/json").Do(ctx).Error(); err != nil {
		t.Fatal(err)
	}
	h.create(daemon("good", "agent:v1"))
	h.rolledOut("good", "agent:v1", clusterNodes) // the controller copes too
	cl, out := h.kubectlEDS("")
	if err := cl.Get(ctx, ""); err != nil {
		t.Fatalf("get of the namespace: %v", err)
	}
	var badRow, goodRow bool
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		badRow = badRow || (len(f) > 8 && f[0] == "bad" && f[7] == "Invalid" && f[8] == "Undecodable")
		goodRow = goodRow || (len(f) > 0 && f[0] == "good")
	}
	if !badRow || !goodRow || !strings.Contains(out.String(), `cannot be read`) || !strings.Contains(out.String(), `invalid duration "9999999999999999h"`) {
		t.Errorf("get table: want good, and bad as Invalid/Undecodable with why:\n%s", out.String())
	}
	out.Reset()
	if err := cl.Get(ctx, "bad"); err != nil || !strings.Contains(out.String(), "Undecodable") {
		t.Errorf("get bad: %v\n%s", err, out.String())
	}
	js, jout := h.kubectlEDS("json")
	if err := js.Get(ctx, ""); err != nil || !strings.Contains(jout.String(), "9999999999999999h") {
		t.Errorf("get -o json: %v\n%s", err, jout.String())
	}
}
