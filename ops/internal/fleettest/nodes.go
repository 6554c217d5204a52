package fleettest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// The fleet's nodes as a test changes and reads them.

// PatchNodeAnnotation sets annotation k of node to v.
func (f *Fleet) PatchNodeAnnotation(node, k, v string) error {
	data := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, k, v)
	_, err := f.Kube.CoreV1().Nodes().Patch(context.Background(), node, "application/merge-patch+json", []byte(data), metav1.PatchOptions{})
	return err
}

// Heartbeat writes node's agent heartbeat as if its agent just reported.
func (f *Fleet) Heartbeat(node string) {
	f.T.Helper()
	now, secs := metav1.NewMicroTime(time.Now()), int32(180)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: protocol.AgentLeaseName(node), Namespace: f.NS},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &node, LeaseDurationSeconds: &secs, RenewTime: &now}}
	if _, err := f.Kube.CoordinationV1().Leases(f.NS).Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
		f.T.Fatal(err)
	}
}

// SetReady sets node's Ready condition, again on a conflict (the agent or
// the controller may write the Node at the same time).
func (f *Fleet) SetReady(node string, ready bool) {
	f.T.Helper()
	ctx := context.Background()
	status, reason := corev1.ConditionTrue, "KubeletReady"
	if !ready {
		status, reason = corev1.ConditionUnknown, "NodeStatusUnknown"
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := f.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: reason,
			LastTransitionTime: metav1.Now(), LastHeartbeatTime: metav1.Now()}}
		_, err = f.Kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		f.T.Fatalf("set node %s Ready=%t: %v", node, ready, err)
	}
}

// Node reads node.
func (f *Fleet) Node(name string) *corev1.Node {
	f.T.Helper()
	n, err := f.Kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.T.Fatal(err)
	}
	return n
}

// PatchNodeLabel sets label k of node to v.
func (f *Fleet) PatchNodeLabel(node, k, v string) error {
	_, err := f.Kube.CoreV1().Nodes().Patch(context.Background(), node, "application/merge-patch+json",
		[]byte(`{"metadata":{"labels":{"`+k+`":"`+v+`"}}}`), metav1.PatchOptions{})
	return err
}

// BlockEviction puts on node a pod owned by a controller and a
// PodDisruptionBudget that never allows its eviction.
func (f *Fleet) BlockEviction(t *testing.T, node string) {
	t.Helper()
	ctx := context.Background() // the namespace's ServiceAccount "default": the fleet made it (New)
	yes := true
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: f.NS, Labels: map[string]string{"app": "guarded"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "guarded", UID: "0d1e7c5e-0000-4000-8000-000000000001", Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/fake"}}}}
	p, err := f.Kube.CoreV1().Pods(f.NS).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	if _, err := f.Kube.CoreV1().Pods(f.NS).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: f.NS},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}}}}
	if _, err := f.Kube.PolicyV1().PodDisruptionBudgets(f.NS).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No disruption controller runs here: the budget's status stays
	// unprocessed, and the Eviction API refuses (429) every eviction, once
	// it sees the budget: wait for that, so that no drain comes first. The
	// probe asks once per call: client-go would retry a 429 after its
	// Retry-After (10 s) up to 10 times, 100 s before it answers.
	dry := &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := f.Kube.CoreV1().RESTClient().Post().Namespace(f.NS).Resource("pods").Name("guarded").SubResource("eviction").MaxRetries(0).
			Body(&policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: f.NS}, DeleteOptions: dry}).Do(ctx).Error()
		if apierrors.IsTooManyRequests(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Eviction API does not refuse the guarded pod's eviction: %v", err)
		}
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = f.Kube.CoreV1().Pods(f.NS).Delete(context.Background(), "guarded", metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
}

// WaitNode polls node every 100 ms, up to waitNodeBudget, until cond holds.
func (f *Fleet) WaitNode(t *testing.T, node, what string, cond func(*corev1.Node) bool) {
	t.Helper()
	deadline := time.Now().Add(waitNodeBudget)
	for {
		n, err := f.Kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err == nil && cond(n) {
			return
		}
		if time.Now().After(deadline) {
			f.DumpLogs(node)
			t.Fatalf("node %s not %s within %s (last read: %v, labels %v, annotations %v)",
				node, what, waitNodeBudget, err, n.GetLabels(), n.GetAnnotations())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Versions are node's versions as its agent publishes them
// (protocol.PublishedVersions: its NodeUpdate's status, or its Node).
func (f *Fleet) Versions(node string) (booted, staged v1.NodeVersions) {
	f.T.Helper()
	ctx := context.Background()
	n, err := f.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		f.T.Fatal(err)
	}
	u, err := f.Ops.OpsV1().NodeUpdates(f.NS).Get(ctx, protocol.NodeUpdateName(node), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		u = nil
	} else if err != nil {
		f.T.Fatal(err)
	}
	return protocol.PublishedVersions(n.Annotations, u)
}

// Staged is the rootfs version node publishes as staged for its next boot ("": none).
func (f *Fleet) Staged(node string) string {
	f.T.Helper()
	_, s := f.Versions(node)
	return s.Rootfs
}

// waitNodeBudget bounds WaitNode. It is a deadline for a stuck test, not a
// timing claim: under a full parallel `make test` on two cores, staging
// and the first Job of a fleet have taken more than 30 s.
const waitNodeBudget = 90 * time.Second

// ShowViews writes on each of the fleet's nodes its view of ch, as the
// controller does after it writes ch's status: for tests whose controller
// is stopped, so that the test alone decides the slots.
func (f *Fleet) ShowViews(t *testing.T, ch *v1.UpdateChannel) {
	t.Helper()
	ctx := context.Background()
	nodes, err := f.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "fleet=" + f.NS})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		var val any
		if v, ok := plan.ViewOf(ch, n.Name, true); ok {
			val = v.String()
		}
		data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{protocol.ViewKey(ch.UID): val}}})
		if _, err := f.Kube.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// WaitAgentSees waits (WaitNode's budget) until node's views and reports,
// read where its agent reads and writes them (its NodeUpdate once the
// controller and the agent moved there, else its Node:
// protocol.NodeViews, protocol.NodeReports), satisfy cond.
func (f *Fleet) WaitAgentSees(t *testing.T, node, what string, cond func(views map[types.UID]protocol.View, reports protocol.Reports) bool) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(waitNodeBudget)
	for {
		n, err := f.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		var u *v1.NodeUpdate
		if err == nil {
			if u, err = f.Ops.OpsV1().NodeUpdates(f.NS).Get(ctx, protocol.NodeUpdateName(node), metav1.GetOptions{}); apierrors.IsNotFound(err) {
				u, err = nil, nil
			}
		}
		if err == nil {
			reports, rerr := protocol.NodeReports(n.Annotations, u)
			if rerr == nil && cond(protocol.NodeViews(n.Annotations, u, f.NS, func(string, error) {}), reports) {
				return
			}
		}
		if time.Now().After(deadline) {
			f.DumpLogs(node)
			t.Fatalf("node %s not %s within %s (last read: %v; its NodeUpdate: %+v)", node, what, waitNodeBudget, err, u)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
