package eds

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/lease"
	"slipway.dev/slipway/ops/testenv"
)

// A leader-elected controller whose Lease tenure ended (it stalled, and
// another replica may lead and delete pods of its own) deletes no pod: the
// two together would exceed maxUnavailable. Without election nothing is
// fenced.
func TestStalledLeaderDeletesNoPod(t *testing.T) {
	e := testenv.Need(t, env)
	stalled, err := New(Options{Config: e.Config, LeaderElect: true, LeaseNamespace: "default", LeaseName: "fence-eds"})
	if err != nil {
		t.Fatal(err)
	}
	unelected, err := New(Options{Config: e.Config})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	name := fmt.Sprintf("fenced-%d", time.Now().UnixNano())
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}, NodeName: "fenced-nowhere"}}
	if _, err := unelected.kube.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unelected.kube.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}) })

	if err := stalled.deletePod(ctx, "default/fenced", "default", name); !errors.Is(err, lease.ErrTenureEnded) {
		t.Errorf("a leader past its tenure deleting a pod: err %v, want %v", err, lease.ErrTenureEnded)
	}
	if _, err := stalled.kube.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatalf("reads go on past the tenure, and the pod must be there: %v", err)
	}

	if err := unelected.deletePod(ctx, "default/fenced", "default", name); err != nil {
		t.Fatal(err)
	}
	p, err := unelected.kube.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err == nil && p.DeletionTimestamp == nil {
		t.Error("the delete without election left the pod")
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}
