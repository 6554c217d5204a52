package eds

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/crds"
	"slipway.dev/slipway/ops/generated/eds/clientset/versioned"
	"slipway.dev/slipway/ops/testenv"
)

var env *testenv.Env

// clusterNodes is how many fake nodes the shared simulated cluster has.
const clusterNodes = 5

func TestMain(m *testing.M) {
	edsCRDs, err := crds.OfGroup(v1.SchemeGroupVersion.Group)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(testenv.RunMain(m, testenv.Options{Cluster: true, Nodes: clusterNodes, CRDs: edsCRDs}, &env))
}

// harness is one test's namespace with a controller limited to it.
type harness struct {
	t    *testing.T
	ns   string
	kube kubernetes.Interface
	eds  versioned.Interface
	ctrl *Controller
}

var nsSeq atomic.Int32

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := newBareHarness(t)
	h.startController(Options{Config: env.Config})
	return h
}

// newBareHarness is a harness whose controller the test starts itself.
func newBareHarness(t *testing.T) *harness {
	t.Helper()
	e := testenv.Need(t, env)
	h := &harness{t: t, ns: fmt.Sprintf("eds-%d-%d", time.Now().UnixNano()%1e6, nsSeq.Add(1))}
	var err error
	if h.kube, err = kubernetes.NewForConfig(e.Config); err != nil {
		t.Fatal(err)
	}
	if h.eds, err = versioned.NewForConfig(e.Config); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := h.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: h.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.kube.CoreV1().Namespaces().Delete(context.Background(), h.ns, metav1.DeleteOptions{}) })
	return h
}

// startController runs a controller limited to the test's namespace until the test ends.
func (h *harness) startController(opts Options) { h.t.Helper(); h.startControllerWith(opts, nil) }

// startControllerWith is startController with edit applied to the
// controller before it runs.
func (h *harness) startControllerWith(opts Options, edit func(*Controller)) {
	h.t.Helper()
	opts.Namespace = h.ns
	opts.Log = slog.New(slog.NewTextHandler(testWriter{h.t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var err error
	if h.ctrl, err = New(opts); err != nil {
		h.t.Fatal(err)
	}
	if edit != nil {
		edit(h.ctrl)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.ctrl.Run(ctx) }()
	h.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			h.t.Errorf("controller: %v", err)
		}
	})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// daemon is an ExtendedDaemonSet of one container running image.
func daemon(name, image string) *v1.ExtendedDaemonSet {
	return &v1.ExtendedDaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.ExtendedDaemonSetSpec{Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "daemon", Image: image}}},
		}},
	}
}

// withCanary gives e a canary of one node validated after duration.
func withCanary(e *v1.ExtendedDaemonSet, duration time.Duration) *v1.ExtendedDaemonSet {
	one := intstr.FromInt32(1)
	e.Spec.Strategy.Canary = &v1.ExtendedDaemonSetSpecStrategyCanary{Replicas: &one,
		Duration: &metav1.Duration{Duration: duration}, NoRestartsDuration: &metav1.Duration{Duration: time.Second}}
	return e
}

func (h *harness) create(e *v1.ExtendedDaemonSet) *v1.ExtendedDaemonSet {
	h.t.Helper()
	out, err := h.eds.EdsV1alpha1().ExtendedDaemonSets(h.ns).Create(context.Background(), e, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

func (h *harness) get(name string) *v1.ExtendedDaemonSet {
	h.t.Helper()
	e, err := h.eds.EdsV1alpha1().ExtendedDaemonSets(h.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return e
}

// setImage changes the template's image (a new ERS).
func (h *harness) setImage(name, image string) {
	h.t.Helper()
	patch := fmt.Sprintf(`[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":%q}]`, image)
	if _, err := h.eds.EdsV1alpha1().ExtendedDaemonSets(h.ns).Patch(context.Background(), name, types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) pods(name string) []corev1.Pod {
	h.t.Helper()
	list, err := h.kube.CoreV1().Pods(h.ns).List(context.Background(), metav1.ListOptions{LabelSelector: v1.LabelName + "=" + name})
	if err != nil {
		h.t.Fatal(err)
	}
	return list.Items
}

// eventually polls cond every 100 ms until it holds or timeout passes.
func (h *harness) eventually(timeout time.Duration, what string, cond func() (bool, string)) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(100 * time.Millisecond)
	}
	h.t.Fatalf("timed out after %v waiting for %s; last: %s", timeout, what, last)
}

// rolledOut waits until every node runs one available pod of image and the state is Running.
func (h *harness) rolledOut(name, image string, nodes int) {
	h.t.Helper()
	h.rolledOutState(name, image, nodes, v1.StateRunning)
}

// rolledOutState waits until every node runs one available pod of image in
// the given state (2 minutes: a loaded machine slows kwok's pod status, and
// the package's tests run in parallel on one simulated cluster).
func (h *harness) rolledOutState(name, image string, nodes int, state v1.ExtendedDaemonSetStatusState) {
	h.t.Helper()
	h.eventually(2*time.Minute, name+" rolled out with "+image, func() (bool, string) {
		e := h.get(name)
		n := 0
		for _, p := range h.pods(name) {
			if p.DeletionTimestamp == nil && p.Spec.Containers[0].Image == image && p.Status.Phase == corev1.PodRunning {
				n++
			}
		}
		s := e.Status
		return n == nodes && s.State == state && s.UpToDate == int32(nodes) && s.Available == int32(nodes),
			fmt.Sprintf("%d pods of %s; status %+v", n, image, s)
	})
}

// crash makes a pod's container look restarted n times, now waiting in CrashLoopBackOff.
func (h *harness) crash(pod string, n int32) {
	h.t.Helper()
	status := map[string]any{"status": map[string]any{
		"conditions": []map[string]any{{"type": "Ready", "status": "False", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}},
		"containerStatuses": []map[string]any{{"name": "daemon", "image": "x", "imageID": "", "ready": false, "restartCount": n,
			"state":     map[string]any{"waiting": map[string]any{"reason": "CrashLoopBackOff"}},
			"lastState": map[string]any{"terminated": map[string]any{"exitCode": 1, "reason": "Error", "finishedAt": time.Now().UTC().Format(time.RFC3339)}}}},
	}}
	h.patchStatus(pod, status)
}

func (h *harness) patchStatus(pod string, status map[string]any) {
	h.t.Helper()
	raw, _ := json.Marshal(status)
	if _, err := h.kube.CoreV1().Pods(h.ns).Patch(context.Background(), pod, types.StrategicMergePatchType, raw, metav1.PatchOptions{}, "status"); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) canaryPod(name, ers string) corev1.Pod {
	h.t.Helper()
	var out corev1.Pod
	h.eventually(30*time.Second, "a canary pod of "+ers, func() (bool, string) {
		for _, p := range h.pods(name) {
			if p.Labels[v1.LabelReplicaSet] == ers && p.Labels[v1.LabelCanary] == "true" && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				out = p
				return true, ""
			}
		}
		return false, "none running"
	})
	return out
}

func (h *harness) waitState(name string, want v1.ExtendedDaemonSetStatusState, timeout time.Duration) *v1.ExtendedDaemonSet {
	h.t.Helper()
	var e *v1.ExtendedDaemonSet
	h.eventually(timeout, name+" in state "+string(want), func() (bool, string) {
		e = h.get(name)
		return e.Status.State == want, fmt.Sprintf("%+v", e.Status)
	})
	return e
}

// events are the reasons of the Events recorded about object name.
func (h *harness) events(name string) map[string]int {
	h.t.Helper()
	list, err := h.kube.CoreV1().Events(h.ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range list.Items {
		out[e.Reason] += int(e.Count)
	}
	return out
}

// addNode creates a fake node only this test's daemons run on: it is
// labelled and tainted eds-test=<namespace>, and tolerate(e) lets e run there.
func (h *harness) addNode(suffix string) string {
	h.t.Helper()
	name := h.ns + "-" + suffix
	n := testenv.FakeNode(name)
	n.Labels["eds-test"] = h.ns
	n.Spec.Taints = []corev1.Taint{{Key: "eds-test", Value: h.ns, Effect: corev1.TaintEffectNoSchedule}}
	if _, err := h.kube.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = h.kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return name
}

// tolerate lets e run on the nodes addNode creates for this test.
func (h *harness) tolerate(e *v1.ExtendedDaemonSet) *v1.ExtendedDaemonSet {
	e.Spec.Template.Spec.Tolerations = append(e.Spec.Template.Spec.Tolerations,
		corev1.Toleration{Key: "eds-test", Operator: corev1.TolerationOpEqual, Value: h.ns, Effect: corev1.TaintEffectNoSchedule})
	return e
}
