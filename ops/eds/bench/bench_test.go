package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
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

var (
	env   *testenv.Env
	audit string
	nodes = envInt("SLIPWAY_BENCH_NODES", 100)
)

const maxUnavailable = 10

// rounds is how many times each contender rolls out (medians reported).
var rounds = envInt("SLIPWAY_BENCH_ROUNDS", 3)

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run()) // no benchmark asked: no cluster
	}
	dir, err := os.MkdirTemp("", "slipway-eds-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	audit = filepath.Join(dir, "audit.log")
	edsCRDs, err := crds.OfGroup(v1.SchemeGroupVersion.Group)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(testenv.RunMain(m, testenv.Options{Cluster: true, Nodes: nodes, CRDs: edsCRDs, AuditLog: audit, Progress: os.Stderr}, &env))
}

type clients struct {
	kube kubernetes.Interface
	eds  versioned.Interface
}

// window is one measured rollout.
type window struct {
	start, end time.Time
	wall       time.Duration
}

func waitFor(b *testing.B, timeout time.Duration, what string, cond func() (bool, string)) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		ok, s := cond()
		if ok {
			return
		}
		last = s
		time.Sleep(50 * time.Millisecond)
	}
	b.Fatalf("timed out after %v waiting for %s; last: %s", timeout, what, last)
}

func (c clients) namespace(b *testing.B, name string) string {
	ns := fmt.Sprintf("%s-%d", name, time.Now().UnixNano()%1e6)
	if _, err := c.kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	return ns
}

func template(app, image string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "daemon", Image: image}}}}
}

// rollDaemonSet creates a DaemonSet on every node, then measures the
// rollout of a new image, and removes it.
func (c clients) rollDaemonSet(b *testing.B) window {
	ctx := context.Background()
	ns := c.namespace(b, "bench-ds")
	mu := intstr.FromInt32(maxUnavailable)
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "daemon"}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "daemon"}}, Template: template("daemon", "daemon:v1"),
		UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &mu}}}}
	if _, err := c.kube.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	done := func() (bool, string) {
		got, err := c.kube.AppsV1().DaemonSets(ns).Get(ctx, "daemon", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s := got.Status
		return s.ObservedGeneration == got.Generation && s.UpdatedNumberScheduled == int32(nodes) && s.NumberAvailable == int32(nodes) &&
			s.NumberUnavailable == 0, fmt.Sprintf("%+v", s)
	}
	waitFor(b, 5*time.Minute, "the DaemonSet on every node", done)
	w := window{start: time.Now()}
	patch := `[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"daemon:v2"}]`
	if _, err := c.kube.AppsV1().DaemonSets(ns).Patch(ctx, "daemon", types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		b.Fatal(err)
	}
	waitFor(b, 10*time.Minute, "the DaemonSet rolled out", done)
	w.end = time.Now()
	w.wall = w.end.Sub(w.start)
	c.cleanup(b, ns)
	return w
}

// rollEDS does the same with an ExtendedDaemonSet.
func (c clients) rollEDS(b *testing.B) window {
	ctx := context.Background()
	ns := c.namespace(b, "bench-eds")
	mu := intstr.FromInt32(maxUnavailable)
	e := &v1.ExtendedDaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "daemon"}, Spec: v1.ExtendedDaemonSetSpec{Template: template("daemon", "daemon:v1")}}
	e.Spec.Strategy.RollingUpdate.MaxUnavailable = &mu
	if _, err := c.eds.EdsV1alpha1().ExtendedDaemonSets(ns).Create(ctx, e, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	done := func() (bool, string) {
		got, err := c.eds.EdsV1alpha1().ExtendedDaemonSets(ns).Get(ctx, "daemon", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s := got.Status
		return s.ObservedGeneration == got.Generation && s.State == v1.StateRunning && s.UpToDate == int32(nodes) &&
			s.Available == int32(nodes) && s.Current == int32(nodes), fmt.Sprintf("%+v", s)
	}
	waitFor(b, 5*time.Minute, "the ExtendedDaemonSet on every node", done)
	w := window{start: time.Now()}
	patch := `[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"daemon:v2"}]`
	if _, err := c.eds.EdsV1alpha1().ExtendedDaemonSets(ns).Patch(ctx, "daemon", types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		b.Fatal(err)
	}
	waitFor(b, 10*time.Minute, "the ExtendedDaemonSet rolled out", done)
	w.end = time.Now()
	w.wall = w.end.Sub(w.start)
	c.cleanup(b, ns)
	return w
}

// cleanup deletes a namespace and waits until its pods are gone, so the
// next measurement runs on an idle cluster.
func (c clients) cleanup(b *testing.B, ns string) {
	ctx := context.Background()
	_ = c.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	waitFor(b, 5*time.Minute, "namespace "+ns+" emptied", func() (bool, string) {
		list, err := c.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 0, fmt.Sprintf("%d pods left", len(list.Items))
	})
}

// canaryPauseLatency measures how long after a canary pod's restart count
// crosses autoPause.maxRestarts the ExtendedDaemonSet shows CanaryPaused.
func (c clients) canaryPauseLatency(b *testing.B) time.Duration {
	ctx := context.Background()
	ns := c.namespace(b, "bench-canary")
	e := &v1.ExtendedDaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "daemon"}, Spec: v1.ExtendedDaemonSetSpec{Template: template("daemon", "daemon:v1"),
		Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: metav1.LabelSelectorOpIn, Values: env.Nodes[:5]}}}}}
	one := intstr.FromInt32(1)
	e.Spec.Strategy.Canary = &v1.ExtendedDaemonSetSpecStrategyCanary{Replicas: &one, Duration: &metav1.Duration{Duration: time.Hour}}
	if _, err := c.eds.EdsV1alpha1().ExtendedDaemonSets(ns).Create(ctx, e, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	get := func() *v1.ExtendedDaemonSet {
		got, err := c.eds.EdsV1alpha1().ExtendedDaemonSets(ns).Get(ctx, "daemon", metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		return got
	}
	waitFor(b, 2*time.Minute, "the canary set running", func() (bool, string) { s := get().Status; return s.Available == 5, fmt.Sprintf("%+v", s) })
	patch := `[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"daemon:v2"}]`
	if _, err := c.eds.EdsV1alpha1().ExtendedDaemonSets(ns).Patch(ctx, "daemon", types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		b.Fatal(err)
	}
	var pod string
	waitFor(b, 2*time.Minute, "the canary pod running", func() (bool, string) {
		list, err := c.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: v1.LabelCanary + "=true"})
		if err != nil || len(list.Items) == 0 || list.Items[0].Status.Phase != corev1.PodRunning {
			return false, "not yet"
		}
		pod = list.Items[0].Name
		return true, ""
	})
	status := fmt.Sprintf(`{"status":{"containerStatuses":[{"name":"daemon","image":"daemon:v2","imageID":"","ready":false,"restartCount":3,
		"state":{"waiting":{"reason":"CrashLoopBackOff"}},"lastState":{"terminated":{"exitCode":1,"reason":"Error","finishedAt":%q}}}]}}`, time.Now().UTC().Format(time.RFC3339))
	start := time.Now()
	if _, err := c.kube.CoreV1().Pods(ns).Patch(ctx, pod, types.StrategicMergePatchType, []byte(status), metav1.PatchOptions{}, "status"); err != nil {
		b.Fatal(err)
	}
	waitFor(b, 30*time.Second, "CanaryPaused", func() (bool, string) { s := get().Status; return s.State == v1.StateCanaryPaused, string(s.State) })
	latency := time.Since(start)
	c.cleanup(b, ns)
	return latency
}

type writeCount struct {
	all, noEvents int
	byResource    map[string]int
	others        map[string]int // pod creations by other user agents (diagnostics)
}

// countWrites counts the accepted writes of the client whose user agent
// starts with agent during w (audit timestamps are the responses').
func countWrites(b *testing.B, w window, agent string) writeCount {
	events, err := testenv.ReadAudit(audit)
	if err != nil {
		b.Fatal(err)
	}
	out := writeCount{byResource: map[string]int{}, others: map[string]int{}}
	for _, ev := range events {
		if ev.Time.Before(w.start) || ev.Time.After(w.end) || ev.Code >= 300 {
			continue
		}
		if ev.Resource == "pods" && ev.Verb == "create" && !strings.HasPrefix(ev.UserAgent, agent) {
			out.others[ev.UserAgent]++
		}
		if !strings.HasPrefix(ev.UserAgent, agent) {
			continue
		}
		out.all++
		out.byResource[ev.Resource+" "+ev.Verb]++
		if ev.Resource != "events" {
			out.noEvents++
		}
	}
	return out
}

// rssMiB is a process's resident memory in MiB (0 when unknown).
func rssMiB(pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.Atoi(f[1])
			return float64(kb) / 1024
		}
	}
	return 0
}

// kubeletStandIn does what a kubelet does and kwok does not: when a node
// that was briefly NotReady (heartbeats late on a loaded machine) is Ready
// again, the node lifecycle controller has marked its pods not Ready, and
// the kubelet reports them Ready again. Both controllers measured get the
// same help; its writes are not counted for either.
func (c clients) kubeletStandIn() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for ctx.Err() == nil {
			time.Sleep(500 * time.Millisecond)
			list, err := c.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: "app=daemon"})
			if err != nil {
				continue
			}
			for _, p := range list.Items {
				if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || !notReadyByNode(&p) {
					continue
				}
				patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"True","lastTransitionTime":%q}]}}`, time.Now().UTC().Format(time.RFC3339))
				_, _ = c.kube.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
			}
		}
	}()
	return cancel
}

// notReadyByNode: containers ready, pod not Ready (what the node lifecycle controller leaves).
func notReadyByNode(p *corev1.Pod) bool {
	containers, ready := false, true
	for _, cond := range p.Status.Conditions {
		switch cond.Type {
		case corev1.ContainersReady:
			containers = cond.Status == corev1.ConditionTrue
		case corev1.PodReady:
			ready = cond.Status == corev1.ConditionTrue
		}
	}
	return containers && !ready
}
