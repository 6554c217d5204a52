package eds

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/lease"
	"slipway.dev/slipway/ops/testenv"
)

// A controller whose Lease tenure ended (it stalled, and another replica
// may lead and delete pods of its own) deletes no pod: the two together
// would exceed maxUnavailable. Without election nothing is fenced.
func TestStalledLeaderDeletesNoPod(t *testing.T) {
	e := testenv.Need(t, env)
	c, err := New(Options{Config: e.Config})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	name := fmt.Sprintf("fenced-%d", time.Now().UnixNano())
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}, NodeName: "fenced-nowhere"}}
	if _, err := c.kube.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.kube.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}) })

	c.tenure = &lease.Tenure{} // held once, renewed no more: ended
	if err := c.deletePod(ctx, "default/fenced", "default", name); err == nil {
		t.Error("a leader past its tenure deleted a pod")
	}
	if _, err := c.kube.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the pod after a fenced delete: %v", err)
	}

	c.tenure = nil // no election
	if err := c.deletePod(ctx, "default/fenced", "default", name); err != nil {
		t.Fatal(err)
	}
	p, err := c.kube.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err == nil && p.DeletionTimestamp == nil {
		t.Error("the unfenced delete left the pod")
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}
