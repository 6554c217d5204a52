package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/lease"
	"slipway.dev/slipway/ops/swarm/plan"
)

// A replica that does not hold the Lease (or whose tenure ended) cannot
// write: its clients are fenced by the tenure, as the other controllers'.
func TestWritesFencedByTheTenure(t *testing.T) {
	t.Parallel() // a namespace of its own (see TestMain)
	p := newPool(t, true)
	c, err := New(Options{Config: env.Config, Namespace: p.ns, Identity: "stalled"})
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "work" + swarmv1.ConfigMapSuffix}}
	_, err = c.kube.CoreV1().ConfigMaps(p.ns).Create(context.Background(), cm, metav1.CreateOptions{})
	if !errors.Is(err, lease.ErrTenureEnded) {
		t.Errorf("a replica without the Lease wrote the workers' ConfigMap: %v", err)
	}
	if _, err := c.kube.CoreV1().ConfigMaps(p.ns).List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Errorf("reads must go on without the Lease: %v", err)
	}
}

// A restart whose delete did nothing (the pod gone, or replaced: another
// UID) records no WorkerRestarted Event and counts no refresh.
func TestRestartEventOnlyForADeleteThatDidSomething(t *testing.T) {
	t.Parallel() // a namespace of its own (see TestMain)
	p := newPool(t, true)
	ctx := context.Background()
	pod, err := p.kube.CoreV1().Pods(p.ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w-0"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "worker:test"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Options{Config: env.Config, Namespace: p.ns, Identity: "t", LeaseName: "restart-test"})
	if err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	go c.elect(lctx)
	for deadline := time.Now().Add(30 * time.Second); !c.Leading(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the replica did not take its Lease in 30 s")
		}
	}
	events := record.NewFakeRecorder(10)
	c.recorder = events
	sw := &swarmv1.Swarm{ObjectMeta: metav1.ObjectMeta{Name: "work", Namespace: p.ns}}
	pods := []plan.Pod{{Name: "w-0", UID: "another-uid"}, {Name: "gone", UID: "x"}}
	if err := c.restart(ctx, sw, []string{"w-0", "gone"}, pods); err != nil {
		t.Fatal(err)
	}
	if n := len(events.Events); n != 0 {
		t.Errorf("%d WorkerRestarted Events for deletes that did nothing: %s", n, <-events.Events)
	}
	pods[0].UID = string(pod.UID)
	if err := c.restart(ctx, sw, []string{"w-0"}, pods); err != nil {
		t.Fatal(err)
	}
	if n := len(events.Events); n != 1 {
		t.Errorf("%d Events for a delete that restarted w-0, want 1", n)
	}
}
