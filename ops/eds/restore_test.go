package eds

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
)

// specPatches counts the PATCHes of ExtendedDaemonSet specs (not status)
// a client sends.
type specPatches struct {
	next http.RoundTripper
	n    atomic.Int32
}

func (s *specPatches) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPatch && strings.Contains(req.URL.Path, "/extendeddaemonsets/") && !strings.HasSuffix(req.URL.Path, "/status") {
		s.n.Add(1)
	}
	return s.next.RoundTrip(req)
}

// withdraw installs a ValidatingAdmissionPolicy, bound to the test's
// namespace, that refuses (422 Invalid, as a site policy may) any update
// of an ExtendedDaemonSet whose template runs image; it returns a function
// that removes the binding.
func (h *harness) withdraw(image string) (unbind func()) {
	h.t.Helper()
	ctx := context.Background()
	name := "withdraw-" + h.ns
	fail := admissionv1.Fail
	policy := &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{Operations: []admissionv1.OperationType{admissionv1.Update},
					Rule: admissionv1.Rule{APIGroups: []string{v1.SchemeGroupVersion.Group}, APIVersions: []string{"*"}, Resources: []string{"extendeddaemonsets"}}}}}},
			Validations: []admissionv1.Validation{{
				Expression: fmt.Sprintf("object.spec.template.spec.containers.all(c, c.image != %q)", image),
				Message:    image + " is withdrawn by the site policy",
				Reason:     ptr.To(metav1.StatusReasonInvalid),
			}},
		}}
	if _, err := h.kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		_ = h.kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{})
	})
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			MatchResources: &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": h.ns}}}}}
	if _, err := h.kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	unbind = func() {
		_ = h.kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{})
	}
	h.t.Cleanup(unbind)
	return unbind
}

// Defect: a restore the API server refuses (a site policy added after v1
// that v1's template breaks) was read as "the spec changed", the state
// said Canary Failed with v2 still in the spec, and the sync came back
// after 1 ms, past the rate limiter (248 PATCHes in 5 s). Now the sync
// backs off, the EDS says ReconcileError (condition and Event), the state
// is not Canary Failed before the spec holds v1, and once the policy goes
// the restore goes through.
func TestRefusedRestoreBacksOffAndSaysWhy(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t)
	counter := &specPatches{}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter })
	h.startController(Options{Config: cfg})
	h.create(manual(daemon("agent", "agent:v1")))
	h.rolledOut("agent", "agent:v1", clusterNodes)
	h.setImage("agent", "agent:v2")
	h.waitState("agent", v1.StateCanary, 20*time.Second)

	unbind := h.withdraw("agent:v1")
	ctx := context.Background()
	h.eventually(30*time.Second, "the policy in force", func() (bool, string) {
		patch := []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"daemon","image":"agent:v1"}]}}}}`)
		_, err := h.eds.EdsV1alpha1().ExtendedDaemonSets(h.ns).Patch(ctx, "agent", types.MergePatchType, patch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "withdrawn"), fmt.Sprint(err)
	})

	cl, _ := h.kubectlEDS("")
	before := counter.n.Load()
	if err := cl.CanaryFail(ctx, "agent"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	patches := counter.n.Load() - before
	t.Logf("spec PATCHes in the 5 s after the failure: %d", patches)
	// The rate limiter alone allows about 11 in 5 s (5 ms doubling); pod
	// and ERS events of a loaded machine add a few immediate syncs. The
	// loop without backoff sent hundreds.
	if patches > 40 {
		t.Errorf("%d spec PATCHes in 5 s: the refused restore is retried without backing off", patches)
	}
	e := h.get("agent")
	if e.Status.State == v1.StateCanaryFailed || e.Spec.Template.Spec.Containers[0].Image != "agent:v2" {
		t.Errorf("state %s with image %s: Canary Failed must wait for the restored template", e.Status.State, e.Spec.Template.Spec.Containers[0].Image)
	}
	cond := meta.FindStatusCondition(e.Status.Conditions, v1.ConditionReconcileError)
	if cond == nil || cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "withdrawn") || !strings.Contains(cond.Message, "restore the active template") {
		t.Errorf("ReconcileError %+v, want True naming the refused restore and the policy's message", cond)
	}
	if ev := h.events("agent"); ev[EventReconcileError] == 0 {
		t.Errorf("no %s Event: %v", EventReconcileError, ev)
	}

	unbind() // the site fixes its policy: the next retry (at most 30 s later) restores v1
	e = h.waitState("agent", v1.StateCanaryFailed, 60*time.Second)
	if img := e.Spec.Template.Spec.Containers[0].Image; img != "agent:v1" {
		t.Errorf("Canary Failed with image %s, want agent:v1 restored", img)
	}
	h.rolledOutState("agent", "agent:v1", clusterNodes, v1.StateCanaryFailed)
	if cond := meta.FindStatusCondition(h.get("agent").Status.Conditions, v1.ConditionReconcileError); cond != nil && cond.Status == metav1.ConditionTrue {
		t.Errorf("ReconcileError still True after the restore: %+v", cond)
	}
}

// daemonSetReads counts the GETs and LISTs of DaemonSets and of all pods
// (the old DaemonSet's) a client sends.
type daemonSetReads struct {
	next http.RoundTripper
	n    atomic.Int32
}

func (s *daemonSetReads) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/daemonsets") {
		s.n.Add(1)
	}
	return s.next.RoundTrip(req)
}

// Defect: while the old-daemonset annotation stayed after the migration
// (the DaemonSet deleted), every sync read the DaemonSet again (and listed
// its pods when it was there). A DaemonSet found gone is taken as gone.
func TestOldDaemonSetGoneIsNotReadEverySync(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t)
	counter := &daemonSetReads{}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter })
	h.startController(Options{Config: cfg})
	e := daemon("agent", "agent:v1")
	e.Annotations = map[string]string{v1.AnnotationOldDaemonSet: "deleted-long-ago"}
	e.Spec.Strategy.ReconcileFrequency = &metav1.Duration{Duration: 100 * time.Millisecond}
	h.create(e)
	h.rolledOut("agent", "agent:v1", clusterNodes)
	before := counter.n.Load()
	time.Sleep(3 * time.Second) // about 30 periodic syncs
	if n := counter.n.Load() - before; n > 1 {
		t.Errorf("%d reads of the old DaemonSet in 3 s of syncs; it is gone", n)
	}
	if h.events("agent")[EventMigrated] == 0 {
		t.Errorf("no %s Event saying the migration is over", EventMigrated)
	}
}

// Defect: while the old DaemonSet stayed after the migration (every node
// taken from it, its pods gone, the user not yet deleting it), every sync
// read it again and listed its pods. A drained DaemonSet is read again
// only after oldDrainedRecheck.
func TestOldDaemonSetDrainedIsNotReadEverySync(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t)
	ctx := context.Background()
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent-ds"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent-ds"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent-ds"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "daemon", Image: "agent:ds"}}}}}}
	if _, err := h.kube.AppsV1().DaemonSets(h.ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually(60*time.Second, "the DaemonSet on every node", func() (bool, string) {
		got, err := h.kube.AppsV1().DaemonSets(h.ns).Get(ctx, "agent-ds", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return got.Status.NumberAvailable == clusterNodes, fmt.Sprintf("%+v", got.Status)
	})
	counter := &daemonSetReads{}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter })
	h.startController(Options{Config: cfg})
	e := daemon("agent", "agent:v1")
	e.Annotations = map[string]string{v1.AnnotationOldDaemonSet: "agent-ds"}
	e.Spec.Strategy.ReconcileFrequency = &metav1.Duration{Duration: 100 * time.Millisecond}
	h.create(e)
	h.rolledOut("agent", "agent:v1", clusterNodes)
	h.eventually(60*time.Second, "the DaemonSet drained", func() (bool, string) {
		got, err := h.kube.AppsV1().DaemonSets(h.ns).Get(ctx, "agent-ds", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		list, err := h.kube.CoreV1().Pods(h.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=agent-ds"})
		if err != nil {
			return false, err.Error()
		}
		return oldDrained(got, len(list.Items)), fmt.Sprintf("%+v, %d pods", got.Status, len(list.Items))
	})
	time.Sleep(time.Second) // a sync or two to see it drained
	before := counter.n.Load()
	time.Sleep(3 * time.Second) // about 30 periodic syncs
	if n := counter.n.Load() - before; n > 1 {
		t.Errorf("%d reads of the drained old DaemonSet in 3 s of syncs; want at most one per %s", n, oldDrainedRecheck)
	}
	if _, err := h.kube.AppsV1().DaemonSets(h.ns).Get(ctx, "agent-ds", metav1.GetOptions{}); err != nil {
		t.Errorf("the old DaemonSet: %v; it is the user's to delete", err)
	}
}

func TestOldDaemonSetDrained(t *testing.T) {
	ds := func(gen, observed int64, desired, current, mis int32) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Generation: gen},
			Status: appsv1.DaemonSetStatus{ObservedGeneration: observed, DesiredNumberScheduled: desired, CurrentNumberScheduled: current, NumberMisscheduled: mis}}
	}
	for _, c := range []struct {
		name  string
		ds    *appsv1.DaemonSet
		owned int
		want  bool
	}{
		{"every node taken, no pod left", ds(3, 3, 0, 0, 0), 0, true},
		{"a pod still going", ds(3, 3, 0, 0, 0), 1, false},
		{"its controller has not seen the last exclusion", ds(3, 2, 0, 0, 0), 0, false},
		{"still wanted on a node", ds(3, 3, 1, 0, 0), 0, false},
		{"still scheduled on a node", ds(3, 3, 0, 1, 0), 0, false},
		{"misscheduled on a node", ds(3, 3, 0, 0, 1), 0, false},
	} {
		if got := oldDrained(c.ds, c.owned); got != c.want {
			t.Errorf("%s: drained %v, want %v", c.name, got, c.want)
		}
	}
}
