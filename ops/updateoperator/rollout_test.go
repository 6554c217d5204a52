package updateoperator

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"slipway.dev/slipway/ops/drain"
)

// watcher samples the fleet while a rollout runs: the most nodes the
// operator held cordoned at once, and the fewest ready replicas of a
// Deployment.
type watcher struct {
	mu          sync.Mutex
	maxCordoned int
	minReady    int32
	stop        chan struct{}
	done        chan struct{}
}

func (f *fleet) watch(ns, deploy string) *watcher {
	w := &watcher{minReady: 1 << 30, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			ctx := context.Background()
			cordoned := 0
			for _, name := range f.nodes {
				if n, err := f.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err == nil && drain.CordonedBy(n.Annotations) == f.keys.CordonOwner() {
					cordoned++
				}
			}
			var ready int32 = 1 << 30
			if deploy != "" {
				if d, err := f.kube.AppsV1().Deployments(ns).Get(ctx, deploy, metav1.GetOptions{}); err == nil {
					ready = d.Status.ReadyReplicas
				}
			}
			w.mu.Lock()
			w.maxCordoned = max(w.maxCordoned, cordoned)
			w.minReady = min(w.minReady, ready)
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *watcher) finish() (maxCordoned int, minReady int32) {
	close(w.stop)
	<-w.done
	return w.maxCordoned, w.minReady
}

// guarded creates a Deployment of replicas pods with a PDB keeping
// minAvailable, and waits for it to be ready.
func (f *fleet) guarded(t *testing.T, ns, name string, replicas, minAvailable int32) {
	ctx := context.Background()
	t.Cleanup(func() {
		_ = f.kube.AppsV1().Deployments(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = f.kube.PolicyV1().PodDisruptionBudgets(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: appsv1.DeploymentSpec{
		Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "app"}},
			// Spread, so every updated node holds some of them.
			TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname",
				WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: &metav1.LabelSelector{MatchLabels: labels}}},
		}}}}
	if _, err := f.kube.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	min := intstr.FromInt32(minAvailable)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &min, Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if _, err := f.kube.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "deployment ready", func() (bool, string) {
		d, err := f.kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return d.Status.ReadyReplicas == replicas, fmt.Sprintf("%d of %d ready", d.Status.ReadyReplicas, replicas)
	})
}

func eventually(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	last := ""
	for time.Now().Before(deadline) {
		ok, why := cond()
		if ok {
			return
		}
		last = why
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not after %s (%s)", what, within, last)
}

// done reports whether every node of the fleet runs v2, rests at
// stabilize, up to date, and is not cordoned.
func (f *fleet) done() (bool, string) {
	for _, name := range f.nodes {
		n := f.node(name)
		v := f.keys.View(n, "")
		if got := f.version(name); got != "v2" || v.Wanted != IntentStabilize || v.State != StateUpToDate || n.Spec.Unschedulable || v.CordonedByUs {
			return false, fmt.Sprintf("%s: version %s wanted %s state %s unschedulable %v", name, got, v.Wanted, v.State, n.Spec.Unschedulable)
		}
	}
	return true, ""
}

// The whole protocol on the simulated cluster: half the nodes on the
// slipway platform, half on the Bottlerocket API (423s included), drained
// through a PDB-guarded Deployment, with the controller killed and an agent
// restarted mid-rollout.
func TestRolloutMixedPlatforms(t *testing.T) {
	f := newFleet(t, "mix", 4)
	f.guarded(t, "default", "mix-web", 6, 5)
	w := f.watch("default", "mix-web")
	stop := f.controller(func(o *ControllerOptions) { o.Policy.MaxConcurrent = 2 })
	// Kill the controller once the first node is in flight, restart an agent.
	eventually(t, time.Minute, "a node in flight", func() (bool, string) {
		for _, name := range f.nodes {
			if InFlight(f.keys.View(f.node(name), "")) {
				return true, ""
			}
		}
		return false, "none"
	})
	stop()
	f.stopAgent(f.nodes[1])
	f.startAgent(f.nodes[1])
	stop = f.controller(func(o *ControllerOptions) { o.Policy.MaxConcurrent = 2 })
	defer stop()
	eventually(t, 3*time.Minute, "every node at v2", f.done)
	maxCordoned, minReady := w.finish()
	if maxCordoned > 2 {
		t.Errorf("%d nodes cordoned at once, max-concurrent is 2", maxCordoned)
	}
	if maxCordoned == 0 {
		t.Error("no node was ever seen cordoned: the drain did not happen")
	}
	if minReady < 5 {
		t.Errorf("the PDB-guarded Deployment dropped to %d ready, its PDB keeps 5", minReady)
	}
	for _, name := range f.nodes {
		f.mu.Lock()
		r := f.reboots[name]
		f.mu.Unlock()
		if r != 1 {
			t.Errorf("%s rebooted %d times, want once", name, r)
		}
	}
	for name, srv := range f.br {
		if srv.Locked423 == 0 {
			t.Errorf("%s: the emulator's 423s were never met", name)
		}
	}
}

// Two controller replicas elect one leader through a Lease; the leader is
// stopped mid-rollout and the other finishes it, never more than
// max-concurrent nodes cordoned.
func TestTwoReplicasHandOver(t *testing.T) {
	f := newFleet(t, "ha", 3)
	w := f.watch("", "")
	lease := func(o *ControllerOptions) {
		o.LeaseName, o.LeaseDuration, o.Identity = "ha-update-operator", 3*time.Second, fmt.Sprintf("replica-%d", time.Now().UnixNano())
	}
	stopA := f.controller(lease)
	eventually(t, time.Minute, "a node in flight", func() (bool, string) {
		for _, name := range f.nodes {
			if InFlight(f.keys.View(f.node(name), "")) {
				return true, ""
			}
		}
		return false, "none"
	})
	stopB := f.controller(lease) // a candidate while A leads
	defer stopB()
	stopA()
	eventually(t, 2*time.Minute, "every node at v2", f.done)
	if maxCordoned, _ := w.finish(); maxCordoned > 1 {
		t.Errorf("%d nodes cordoned at once with two replicas, max-concurrent 1", maxCordoned)
	}
}
