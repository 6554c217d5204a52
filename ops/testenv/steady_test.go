package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// EnvSteadyFor, set to a Go duration (e.g. 2h), makes TestFakeNodesStayReady
// watch for that long instead of its default.
const EnvSteadyFor = "SLIPWAY_STEADY_FOR"

// steadyFor is how long TestFakeNodesStayReady watches: by default more than
// twice the node-monitor grace period (50 s), the time after which a node
// without a renewed Lease turns Ready=Unknown.
func steadyFor(t *testing.T) time.Duration {
	s := os.Getenv(EnvSteadyFor)
	if s == "" {
		return 2 * time.Minute
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive Go duration such as 10m or 2h", EnvSteadyFor, s)
	}
	return d
}

// TestFakeNodesStayReady is the long-running check of the simulated cluster:
// fake nodes of its own (no other test takes them down) keep their Leases
// renewed, stay Ready, and a pod on each stays Ready, for minutes. It watches
// the Node, its Lease and the pod; any change away from Ready fails it.
func TestFakeNodesStayReady(t *testing.T) {
	t.Parallel()
	cs := clientset(t)
	ctx := context.Background()
	nodes := []string{"steady-1", "steady-2"}
	for _, n := range nodes {
		if _, err := cs.CoreV1().Nodes().Create(ctx, FakeNode(n), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}) })
		pod := steadyPod(n)
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.CoreV1().Pods("default").Delete(context.Background(), pod.Name, metav1.DeleteOptions{}) })
	}
	for _, n := range nodes {
		until(t, cs.CoreV1().RESTClient(), "nodes", "", n, &corev1.Node{}, func(o runtime.Object) bool { return NodeReady(o.(*corev1.Node)) })
		until(t, cs.CoreV1().RESTClient(), "pods", "default", steadyPod(n).Name, &corev1.Pod{}, func(o runtime.Object) bool { return podReady(o.(*corev1.Pod)) })
	}
	d := steadyFor(t)
	t.Logf("watching %v for %v", nodes, d)
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	errs := make(chan error, 3*len(nodes))
	renewals := make([]int, len(nodes))
	for i, n := range nodes {
		go func() {
			errs <- stayTrue(wctx, cs.CoreV1().RESTClient(), "nodes", "", n, &corev1.Node{}, nodeReadyOrWhy)
		}()
		go func() {
			errs <- stayTrue(wctx, cs.CoreV1().RESTClient(), "pods", "default", steadyPod(n).Name, &corev1.Pod{}, podReadyOrWhy)
		}()
		go func() {
			var err error
			renewals[i], err = leaseRenewals(wctx, cs, n)
			errs <- err
		}()
	}
	for range 3 * len(nodes) {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	// kwok renews a node's Lease every quarter of its 40 s duration: over
	// two minutes that is about twelve times; three is the least a live
	// Lease shows, none is what the simulated cluster once had.
	for i, n := range nodes {
		if renewals[i] < 3 {
			t.Errorf("Lease kube-node-lease/%s renewed %d times in %v, want at least 3", n, renewals[i], d)
		}
	}
}

func steadyPod(node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "steady-on-" + node, Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/fake"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
	}
}

func podReady(p *corev1.Pod) bool { return podReadyOrWhy(p) == "" }

// podReadyOrWhy is "" for a Running and Ready pod, and what is wrong otherwise.
func podReadyOrWhy(o runtime.Object) string {
	p := o.(*corev1.Pod)
	if p.Status.Phase != corev1.PodRunning {
		return fmt.Sprintf("phase %s", p.Status.Phase)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return ""
		}
	}
	return "not Ready"
}

func nodeReadyOrWhy(o runtime.Object) string {
	n := o.(*corev1.Node)
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				return ""
			}
			return fmt.Sprintf("Ready=%s (%s: %s)", c.Status, c.Reason, c.Message)
		}
	}
	return "no Ready condition"
}

// stayTrue watches one object until ctx ends and returns an error as soon
// as why reports it in a wrong state, or it is deleted.
func stayTrue(ctx context.Context, c cache.Getter, resource, ns, name string, obj runtime.Object, why func(runtime.Object) string) error {
	lw := cache.NewListWatchFromClient(c, resource, ns, fields.OneTermEqualSelector("metadata.name", name))
	_, err := watchtools.UntilWithSync(ctx, lw, obj, nil, func(ev watch.Event) (bool, error) {
		if ev.Type == watch.Deleted {
			return false, fmt.Errorf("%s %s deleted", resource, name)
		}
		if w := why(ev.Object); w != "" {
			return false, fmt.Errorf("%s %s: %s at %s", resource, name, w, time.Now().Format(time.RFC3339))
		}
		return false, nil
	})
	return ignoreTimeout(ctx, err)
}

// leaseRenewals counts how often the node's Lease is renewed until ctx ends,
// and fails if it is missing for long or held by nobody.
func leaseRenewals(ctx context.Context, cs kubernetes.Interface, node string) (int, error) {
	renewals := 0
	var last time.Time
	lw := cache.NewListWatchFromClient(cs.CoordinationV1().RESTClient(), "leases", corev1.NamespaceNodeLease, fields.OneTermEqualSelector("metadata.name", node))
	_, err := watchtools.UntilWithSync(ctx, lw, &coordinationv1.Lease{}, nil, func(ev watch.Event) (bool, error) {
		l := ev.Object.(*coordinationv1.Lease)
		if ev.Type == watch.Deleted {
			return false, fmt.Errorf("Lease of %s deleted", node)
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || l.Spec.RenewTime == nil {
			return false, fmt.Errorf("Lease of %s has no holder or renew time", node)
		}
		if t := l.Spec.RenewTime.Time; t.After(last) {
			if !last.IsZero() {
				renewals++
			}
			last = t
		}
		return false, nil
	})
	return renewals, ignoreTimeout(ctx, err)
}

// ignoreTimeout turns the end of the watch window into success.
func ignoreTimeout(ctx context.Context, err error) error {
	if ctx.Err() != nil && (wait.Interrupted(err) || errors.Is(err, context.DeadlineExceeded)) {
		return nil
	}
	return err
}
