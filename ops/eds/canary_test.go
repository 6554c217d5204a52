package eds

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	edscli "slipway.dev/slipway/ops/eds/cli"
	"slipway.dev/slipway/ops/eds/plan"
	"slipway.dev/slipway/ops/kube"
)

// kubectlEDS is the kubectl-eds logic against the test's namespace.
func (h *harness) kubectlEDS(output string) (*edscli.Client, *bytes.Buffer) {
	h.t.Helper()
	k, err := kube.NewForConfig(env.Config)
	if err != nil {
		h.t.Fatal(err)
	}
	var out bytes.Buffer
	return &edscli.Client{Kube: k, EDS: h.ctrl.eds, Namespace: h.ns, Output: output, Out: &out}, &out
}

func manual(e *v1.ExtendedDaemonSet) *v1.ExtendedDaemonSet {
	withCanary(e, 0)
	e.Spec.Strategy.Canary.Duration, e.Spec.Strategy.Canary.NoRestartsDuration = nil, nil
	e.Spec.Strategy.Canary.ValidationMode = v1.ValidationModeManual
	return e
}

func TestManualCanaryValidatedThroughKubectlEDS(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.create(manual(daemon("agent", "agent:v1")))
	h.rolledOut("agent", "agent:v1", clusterNodes)
	h.setImage("agent", "agent:v2")
	e := h.waitState("agent", v1.StateCanary, 20*time.Second)
	h.canaryPod("agent", e.Status.Canary.ReplicaSet)
	cl, out := h.kubectlEDS("")
	ctx := context.Background()
	if err := cl.Diff(ctx, "agent"); err != nil {
		t.Fatal(err)
	}
	if d := out.String(); !strings.Contains(d, "-   - image: agent:v1") || !strings.Contains(d, "+   - image: agent:v2") {
		t.Errorf("diff does not show the image change:\n%s", d)
	}
	out.Reset()
	if err := cl.Pods(ctx, "agent", edscli.SelectCanary); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[1], "true") {
		t.Errorf("canary pods table:\n%s", out.String())
	}
	wide, wout := h.kubectlEDS("wide")
	if err := wide.Get(ctx, "agent"); err != nil {
		t.Fatal(err)
	}
	if got := wout.String(); !strings.Contains(got, "CANARY NODES") || !strings.Contains(got, e.Status.Canary.Nodes[0]) {
		t.Errorf("get -o wide does not name the canary node %s:\n%s", e.Status.Canary.Nodes[0], got)
	}
	time.Sleep(2 * time.Second) // manual mode: no validation by time
	if s := h.get("agent").Status.State; s != v1.StateCanary {
		t.Fatalf("state %s before the manual validation, want Canary", s)
	}
	if err := cl.CanaryValidate(ctx, "agent"); err != nil {
		t.Fatal(err)
	}
	h.rolledOut("agent", "agent:v2", clusterNodes)
	out.Reset()
	if err := cl.Get(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "UP-TO-DATE") || !strings.Contains(out.String(), "Running") {
		t.Errorf("get table:\n%s", out.String())
	}
	if err := cl.CanaryValidate(ctx, "agent"); err == nil || !strings.Contains(err.Error(), "no canary running") {
		t.Errorf("validate without a canary: %v, want a clear refusal", err)
	}
}

func TestManualCanaryFailedThroughKubectlEDS(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.create(manual(daemon("agent", "agent:v1")))
	h.rolledOut("agent", "agent:v1", clusterNodes)
	h.setImage("agent", "agent:v2")
	h.waitState("agent", v1.StateCanary, 20*time.Second)
	cl, out := h.kubectlEDS("json")
	ctx := context.Background()
	seen := h.watchEDS("agent", failedOnlyWithTheTemplateRestored("agent:v1"))
	if err := cl.CanaryPause(ctx, "agent", "Investigating"); err != nil {
		t.Fatal(err)
	}
	e := h.waitState("agent", v1.StateCanaryPaused, 10*time.Second)
	if e.Status.Reason != "Investigating" {
		t.Errorf("paused reason %q, want Investigating", e.Status.Reason)
	}
	if err := cl.CanaryFail(ctx, "agent"); err != nil {
		t.Fatal(err)
	}
	e = h.waitState("agent", v1.StateCanaryFailed, 10*time.Second)
	if e.Status.Reason != "ManuallyFailed" || e.Spec.Template.Spec.Containers[0].Image != "agent:v1" {
		t.Errorf("after canary fail: reason %q, image %s; want ManuallyFailed and agent:v1 restored", e.Status.Reason, e.Spec.Template.Spec.Containers[0].Image)
	}
	h.rolledOutState("agent", "agent:v1", clusterNodes, v1.StateCanaryFailed)
	if bad := seen(); len(bad) > 0 {
		t.Errorf("the watch saw the state CanaryFailed before the restore: %v", bad)
	}
	out.Reset()
	if err := cl.GetERS(ctx, "agent"); err != nil {
		t.Fatal(err)
	}
	var list struct {
		Items []v1.ExtendedDaemonSetReplicaSet
	}
	if err := json.Unmarshal(out.Bytes(), &list); err != nil {
		t.Fatalf("get-ers -o json: %v\n%s", err, out.String())
	}
	statuses := map[string]int{}
	for _, s := range list.Items {
		statuses[s.Status.Status]++
	}
	if statuses[v1.ReplicaSetStatusActive] != 1 || statuses[v1.ReplicaSetStatusCanaryFailed] != 1 {
		t.Errorf("ERS statuses %v: want one active, one canary-failed", statuses)
	}
}

func TestCanaryOfAnImageThatNeverStarts(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	e := withCanary(daemon("agent", "agent:v1"), 2*time.Second)
	e.Spec.Strategy.Canary.AutoFail = &v1.ExtendedDaemonSetSpecStrategyCanaryAutoFail{CanaryTimeout: &metav1.Duration{Duration: 5 * time.Second}}
	h.create(e)
	h.rolledOut("agent", "agent:v1", clusterNodes)
	stop := h.neverStarts("agent:broken")
	defer stop()
	h.setImage("agent", "agent:broken")
	got := h.waitState("agent", v1.StateCanaryPaused, 20*time.Second)
	if got.Status.Reason != "ErrImagePull" {
		t.Errorf("paused reason %q, want ErrImagePull", got.Status.Reason)
	}
	got = h.waitState("agent", v1.StateCanaryFailed, 20*time.Second)
	if got.Status.Reason != "TimeoutExceeded" {
		t.Errorf("failed reason %q, want TimeoutExceeded", got.Status.Reason)
	}
	h.rolledOutState("agent", "agent:v1", clusterNodes, v1.StateCanaryFailed)
}

// Issue 24 item 8: DataDog's missing-volume example: a canary container
// that stays in ContainerCreating longer than maxSlowStartDuration pauses
// the canary (SlowStartTimeoutExceeded); it used to wait forever.
func TestCanaryStuckCreatingPauses(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	e := withCanary(daemon("agent", "agent:v1"), time.Hour)
	e.Spec.Strategy.Canary.AutoPause = &v1.ExtendedDaemonSetSpecStrategyCanaryAutoPause{MaxSlowStartDuration: &metav1.Duration{Duration: 2 * time.Second}}
	h.create(e)
	h.rolledOut("agent", "agent:v1", clusterNodes)
	stop := h.waitsIn("agent:missing-volume", "ContainerCreating")
	defer stop()
	h.setImage("agent", "agent:missing-volume")
	got := h.waitState("agent", v1.StateCanaryPaused, 30*time.Second)
	if got.Status.Reason != plan.ReasonSlowStartTimeoutExceeded {
		t.Errorf("paused reason %q, want %s", got.Status.Reason, plan.ReasonSlowStartTimeoutExceeded)
	}
}

// watchEDS watches ExtendedDaemonSet name from now on and runs check on
// every version of it the API server sends; seen stops the watch and
// returns what check found wrong.
func (h *harness) watchEDS(name string, check func(*v1.ExtendedDaemonSet) string) (seen func() []string) {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := h.eds.EdsV1alpha1().ExtendedDaemonSets(h.ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		h.t.Fatal(err)
	}
	var bad []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if e, ok := ev.Object.(*v1.ExtendedDaemonSet); ok {
				if msg := check(e); msg != "" {
					bad = append(bad, fmt.Sprintf("resourceVersion %s: %s", e.ResourceVersion, msg))
				}
			}
		}
	}()
	var once sync.Once
	return func() []string {
		once.Do(func() { cancel(); w.Stop(); <-done })
		return bad
	}
}

// failedOnlyWithTheTemplateRestored finds an ExtendedDaemonSet whose state
// says CanaryFailed while its spec still holds another image than restored.
func failedOnlyWithTheTemplateRestored(restored string) func(*v1.ExtendedDaemonSet) string {
	return func(e *v1.ExtendedDaemonSet) string {
		if img := e.Spec.Template.Spec.Containers[0].Image; e.Status.State == v1.StateCanaryFailed && img != restored {
			return "state CanaryFailed with image " + img
		}
		return ""
	}
}

// neverStarts plays a kubelet that cannot pull image: every pod of the
// test's namespace running it gets its container waiting in ErrImagePull.
func (h *harness) neverStarts(image string) (stop func()) { return h.waitsIn(image, "ErrImagePull") }

// waitsIn plays a kubelet whose containers of image wait with reason.
func (h *harness) waitsIn(image, reason string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for ctx.Err() == nil {
			list, err := h.kube.CoreV1().Pods(h.ns).List(ctx, metav1.ListOptions{})
			if err == nil {
				for _, p := range list.Items {
					if p.Spec.Containers[0].Image == image && p.DeletionTimestamp == nil && p.Spec.NodeName != "" && !waiting(&p, reason) {
						h.patchStatusQuiet(ctx, p.Name, map[string]any{"status": map[string]any{"phase": "Running",
							"conditions": []map[string]any{{"type": "Ready", "status": "False"}},
							"containerStatuses": []map[string]any{{"name": "daemon", "image": image, "imageID": "", "ready": false, "restartCount": 0,
								"state": map[string]any{"waiting": map[string]any{"reason": reason, "message": "simulated"}}}}}})
					}
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return cancel
}

func waiting(p *corev1.Pod, reason string) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Waiting != nil && cs.State.Waiting.Reason == reason {
			return true
		}
	}
	return false
}

func (h *harness) patchStatusQuiet(ctx context.Context, pod string, status map[string]any) {
	raw, _ := json.Marshal(status)
	_, _ = h.kube.CoreV1().Pods(h.ns).Patch(ctx, pod, "application/strategic-merge-patch+json", raw, metav1.PatchOptions{}, "status")
}

// Issue 24 item 9: a canary whose template no node admits (a nodeSelector
// typo) fails at once, reason NoEligibleNode, and the active template comes
// back; it used to stay in Canary forever.
func TestCanaryWithNoEligibleNodeFails(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.create(withCanary(daemon("agent", "agent:v1"), time.Hour))
	h.rolledOut("agent", "agent:v1", clusterNodes)
	ctx := context.Background()
	patch := []byte(`{"spec":{"template":{"spec":{"nodeSelector":{"no-such-label":"x"},"containers":[{"name":"daemon","image":"agent:v2"}]}}}}`)
	if _, err := h.eds.EdsV1alpha1().ExtendedDaemonSets(h.ns).Patch(ctx, "agent", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e := h.waitState("agent", v1.StateCanaryFailed, 30*time.Second)
	if e.Status.Reason != plan.ReasonNoEligibleNode {
		t.Errorf("reason %q, want %s", e.Status.Reason, plan.ReasonNoEligibleNode)
	}
	h.eventually(30*time.Second, "the template restored", func() (bool, string) {
		img := h.get("agent").Spec.Template.Spec.Containers[0].Image
		return img == "agent:v1", img
	})
	h.rolledOutState("agent", "agent:v1", clusterNodes, v1.StateCanaryFailed)
}
