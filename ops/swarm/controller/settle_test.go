package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
)

// A pool that stays unsettled (a slow scale, a flapping pod) is reassigned
// once per settle timeout, each time until its handover is done, not on
// every event after the first timeout.
func TestUnsettledReassignsAtMostOncePerTimeout(t *testing.T) {
	c := &Controller{opts: Options{SettleTimeout: time.Minute}, unsettled: map[string]time.Time{}, forced: map[string]bool{}}
	sw := &swarmv1.Swarm{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "work"}}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, step := range []struct {
		at       time.Duration
		awaiting int
		want     bool
	}{
		{0, 0, false},
		{30 * time.Second, 0, false},
		{61 * time.Second, 3, true},  // forced: the handover begins
		{63 * time.Second, 0, true},  // ...and runs to its end
		{65 * time.Second, 0, false}, // the next event waits again
		{100 * time.Second, 0, false},
		{126 * time.Second, 0, true},
	} {
		got := c.settled(sw, false, t0.Add(step.at))
		if got != step.want {
			t.Errorf("at %s: settled %v, want %v", step.at, got, step.want)
		}
		if got {
			c.handedOver(sw, step.awaiting, t0.Add(step.at))
		}
	}
}

// A pod that carries the pool's labels without being one of its
// StatefulSet's is no worker: it gets no share, and does not unsettle the
// pool.
func TestUnownedPodIsNoWorker(t *testing.T) {
	t.Parallel() // a namespace of its own (see TestMain)
	p := newPool(t, true)
	p.statefulSet(2)
	p.createSwarm(swarmv1.SwarmSpec{Jobs: jobNames(0, 6), Refresh: swarmv1.RefreshReload})
	p.converged(2)
	stray := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "stray", Labels: map[string]string{"app": "worker"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "worker:test"}}}}
	if _, err := p.kube.CoreV1().Pods(p.ns).Create(context.Background(), stray, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p.waitFor("the stray pod Ready", func(*swarmv1.Swarm) bool { return p.readyPods() == 3 })
	p.jobsEdited(jobNames(0, 7)) // an event that reassigns
	sw := p.waitFor("the new job list assigned", func(sw *swarmv1.Swarm) bool {
		return sw.Status.Jobs == 7 && meta.IsStatusConditionTrue(sw.Status.Conditions, swarmv1.ConditionConverged)
	})
	if cfg, _ := p.config(); sw.Status.WorkerCount != 2 || len(cfg.Workloads["stray"].Jobs) > 0 {
		t.Errorf("the stray pod became a worker: %d workers, its share %v", sw.Status.WorkerCount, cfg.Workloads["stray"])
	}
}

func (p *pool) jobsEdited(jobs []string) {
	p.editSwarm(func(s *swarmv1.SwarmSpec) { s.Jobs = jobs })
}

// TestEvictedPodIsNoWorker: a Deployment's pod evicted (phase Failed, as
// the kubelet leaves it) stays in the API until collected, and its
// ReplicaSet starts a replacement. The evicted pod is no worker and does not
// count toward the pool: the pool settles at once on its three pods and the
// evicted pod's jobs move to the replacement, with a settle timeout far
// longer than the test (counting it, the pool would never settle).
func TestEvictedPodIsNoWorker(t *testing.T) {
	t.Parallel() // a namespace of its own (see TestMain)
	p := newPool(t, true)
	p.stopCtrl()
	p.ctrl, p.stopCtrl = p.startControllerSettling("patient", time.Hour)
	labels := map[string]string{"app": "dep-worker"}
	three := int32(3)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "workers", Namespace: p.ns, Labels: map[string]string{"swarm": "work"}},
		Spec:       appsv1.DeploymentSpec{Replicas: &three, Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: podTemplate(labels)},
	}
	if _, err := p.kube.AppsV1().Deployments(p.ns).Create(context.Background(), dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	jobs := jobNames(0, 9)
	p.createSwarm(swarmv1.SwarmSpec{Jobs: jobs, Refresh: swarmv1.RefreshReload})
	p.converged(3)
	before, _ := p.config()
	var victim string
	for w := range before.Workloads {
		victim = w
	}
	pod, err := p.kube.CoreV1().Pods(p.ns).Get(context.Background(), victim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase, pod.Status.Reason, pod.Status.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady {
			pod.Status.Conditions[i].Status = corev1.ConditionFalse
		}
	}
	if _, err := p.kube.CoreV1().Pods(p.ns).UpdateStatus(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p.waitFor("the evicted pod's jobs on its replacement", func(sw *swarmv1.Swarm) bool {
		cfg, _ := p.config()
		_, old := cfg.Workloads[victim]
		return !old && len(cfg.Workloads) == 3 && sw.Status.Unassigned == 0 &&
			meta.IsStatusConditionTrue(sw.Status.Conditions, swarmv1.ConditionConverged)
	})
	cfg, _ := p.config()
	var all []string
	for _, share := range cfg.Workloads {
		all = append(all, share.Jobs...)
	}
	if slices.Sort(all); !slices.Equal(all, jobs) {
		t.Errorf("jobs assigned %v, want each of %v once", all, jobs)
	}
	if pod, err := p.kube.CoreV1().Pods(p.ns).Get(context.Background(), victim, metav1.GetOptions{}); err != nil || pod.Status.Phase != corev1.PodFailed {
		t.Errorf("the evicted pod should still exist, Failed: %v %v", err, pod.Status.Phase)
	}
}
