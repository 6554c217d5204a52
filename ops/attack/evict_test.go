package attack

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"slipway.dev/slipway/ops/manifest"
)

// TestAgentEvictsNoPod (issue 22, "evict or delete a pod on another
// node"): the drain is the controller's; the agent on node-a can neither
// evict nor delete a pod, on node-b or on its own node (but its own slot
// Pods: TestAgentDeletesOnlyItsOwnNodesSlotPods), nor list the pods of the
// cluster. The controller can evict and delete (dry run).
func TestAgentEvictsNoPod(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, asAgent := agentOnA(ctx, t)
	asController := controllerOn(ctx, t)
	admin := kubernetes.NewForConfigOrDie(env.Config)
	ns := agentOpts.Namespace
	for _, node := range []string{"node-a", "node-b"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "work-" + node, Namespace: ns},
			Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: manifest.AgentName, Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	dryDelete := metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
	// RBAC lets the agent delete pods (its slot Pods): the policy, loaded a
	// moment after its creation, refuses every other.
	waitPolicy(t, slotPodDeleteRefusal, func() error { return asAgent.CoreV1().Pods(ns).Delete(ctx, "work-node-b", dryDelete) })
	evict := func(c kubernetes.Interface, pod string) error {
		return c.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: ns}, DeleteOptions: &dryDelete})
	}
	for name, err := range map[string]error{
		"evict a pod on node-b":              evict(asAgent, "work-node-b"),
		"evict a pod on its own node":        evict(asAgent, "work-node-a"),
		"delete a pod on node-b":             asAgent.CoreV1().Pods(ns).Delete(ctx, "work-node-b", dryDelete),
		"delete a pod on its own node":       asAgent.CoreV1().Pods(ns).Delete(ctx, "work-node-a", dryDelete),
		"list the pods of the cluster":       second(asAgent.CoreV1().Pods("").List(ctx, metav1.ListOptions{})),
		"list the pods of another namespace": second(asAgent.CoreV1().Pods("default").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a"})),
	} {
		if why := refused(err, ""); why != "" {
			t.Errorf("the agent could %s: %s", name, why)
		}
	}
	if err := evict(asController, "work-node-b"); err != nil {
		t.Errorf("the controller cannot evict a pod (its drains): %v", err)
	}
	if err := asController.CoreV1().Pods(ns).Delete(ctx, "work-node-b", dryDelete); err != nil {
		t.Errorf("the controller cannot delete a pod (drain.force): %v", err)
	}
	if _, err := asController.CoreV1().Nodes().Patch(ctx, "node-b", types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`),
		metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("the controller cannot cordon a node (its drains): %v", err)
	}
}
