package updateoperator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestGating(t *testing.T) {
	gate, skipped := Gating([]WorkloadHealth{{Name: "Deployment/a/web", Want: 3, Ready: 3}, {Name: "Deployment/a/broken", Want: 2, Ready: 1},
		{Name: "StatefulSet/a/db", Want: 1, Ready: 1}, {Name: "Deployment/a/gone"}})
	if want := []string{"Deployment/a/gone", "Deployment/a/web", "StatefulSet/a/db"}; fmt.Sprint(gate) != fmt.Sprint(want) {
		t.Errorf("gate %v, want %v", gate, want)
	}
	if len(skipped) != 1 || !strings.HasPrefix(skipped[0], "Deployment/a/broken (1 of 2 ready)") {
		t.Errorf("skipped %v, want the broken Deployment with its counts", skipped)
	}
}

// pinned creates a Deployment of replicas pods that may run only on node,
// each holding host port 7001, so that one pod fits there and the rest
// stay Pending.
func (f *fleet) pinned(t *testing.T, name, node string, replicas int32) {
	ctx := context.Background()
	t.Cleanup(func() {
		_ = f.kube.AppsV1().Deployments("default").Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: appsv1.DeploymentSpec{
		Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/hostname": node},
			Containers:   []corev1.Container{{Name: "app", Image: "app", Ports: []corev1.ContainerPort{{ContainerPort: 7001, HostPort: 7001}}}},
		}}}}
	if _, err := f.kube.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, name+" has one pod ready", func() (bool, string) {
		d, err := f.kube.AppsV1().Deployments("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return d.Status.ReadyReplicas == 1, fmt.Sprintf("%d of %d ready", d.Status.ReadyReplicas, replicas)
	})
}

// A Deployment failing before the drain (one of its two pods can never be
// scheduled) does not hold the rollout: the node it ran on finishes once
// back, and the next node updates, at max-concurrent 1, long before
// --health-timeout.
func TestFailingBeforeTheDrainDoesNotGate(t *testing.T) {
	f := newFleet(t, "gate", 2)
	f.pinned(t, "gate-broken", f.nodes[0], 2)
	stop := f.controller(func(o *ControllerOptions) { o.Policy.Timeouts.Health = 10 * time.Minute })
	defer stop()
	eventually(t, 90*time.Second, "both nodes updated", f.done)
	if w := f.node(f.nodes[0]).Annotations[f.keys.Key(KeyWorkloads)]; w != "" {
		t.Errorf("drained-workloads %q left", w)
	}
}

// A workload healthy before the drain that does not come back (its pods
// can no longer be scheduled anywhere) holds its node only until
// --health-timeout: then the node is finished with a reason and an
// UpdateStuck Event, and the next node updates.
func TestHealthTimeoutMovesOn(t *testing.T) {
	f := newFleet(t, "health", 2)
	first := f.nodes[0]
	f.pinned(t, "health-fragile", first, 1)
	ctx := context.Background()
	reasons := f.seen(first, f.keys.Key(KeyReason))
	const hook = "health.example/ok" // holds the drained node until the workload is broken
	stop := f.controller(func(o *ControllerOptions) {
		o.Policy.Timeouts.Health = 3 * time.Second
		o.BeforeRebootChecks = []string{hook}
	})
	defer stop()
	f.patch(f.nodes[1], map[string]any{"metadata": map[string]any{"annotations": map[string]any{hook: "true"}}}) // the other node's hook says yes at once
	eventually(t, time.Minute, first+" drained, waiting for its before-reboot hook", func() (bool, string) {
		n := f.node(first)
		return n.Labels[f.keys.Key(KeyBeforeReboot)] == "true", "drained-workloads " + n.Annotations[f.keys.Key(KeyWorkloads)]
	})
	// A second replica that fits nowhere (the host port is taken): it will not be healthy again.
	patch := []byte(`{"spec":{"replicas":2}}`)
	if _, err := f.kube.AppsV1().Deployments("default").Patch(ctx, "health-fragile", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.patch(first, map[string]any{"metadata": map[string]any{"annotations": map[string]any{hook: "true"}}})
	eventually(t, 90*time.Second, "both nodes updated", f.done)
	var marked bool
	for _, r := range reasons() {
		marked = marked || strings.Contains(r, "--health-timeout")
	}
	if !marked {
		t.Errorf("reasons %q; want one saying the node moved on past --health-timeout", reasons())
	}
	var stuck bool
	for _, m := range f.eventMessages(first) {
		stuck = stuck || strings.HasPrefix(m, ReasonStuck) && strings.Contains(m, "moved on")
	}
	if !stuck {
		t.Errorf("no %s Event saying the rollout moved on: %v", ReasonStuck, f.eventMessages(first))
	}
}

// seen watches node and keeps the distinct values annotation key took;
// the returned func gives them so far.
func (f *fleet) seen(node, key string) func() []string {
	var mu sync.Mutex
	var vals []string
	f.watchNode(node, func(n *corev1.Node) {
		mu.Lock()
		defer mu.Unlock()
		if v := n.Annotations[key]; v != "" && !slices.Contains(vals, v) {
			vals = append(vals, v)
		}
	})
	return func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(vals) }
}

// watchNode calls each with every version of node seen from now on, until
// the test ends.
func (f *fleet) watchNode(node string, each func(*corev1.Node)) {
	ctx, cancel := context.WithCancel(context.Background())
	f.t.Cleanup(cancel)
	w, err := f.kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + node})
	if err != nil {
		f.t.Fatal(err)
	}
	go func() {
		for ev := range w.ResultChan() {
			if n, ok := ev.Object.(*corev1.Node); ok {
				each(n)
			}
		}
	}()
}
