package attack

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// A Node's metadata deletes: an owner reference to a missing object has
// the garbage collector delete the Node (its pods follow it); a finalizer
// pins it. Neither the agent (on its own Node) nor the controller (on any
// Node) may change either, nor anything of the metadata but labels and
// annotations.

// TestNoNodeOwnerOrFinalizer: the agent's and the controller's real tokens
// set an ownerReference or a finalizer on a Node, and are refused; their
// own writes still pass.
func TestNoNodeOwnerOrFinalizer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, asAgent := agentOnA(ctx, t)
	asController := controllerOn(ctx, t)
	patch := func(c kubernetes.Interface, node, p string) error {
		_, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(p), metav1.PatchOptions{})
		return err
	}
	// The attacks run dry: one the policy let through must not have the
	// garbage collector delete a Node other tests use.
	dry := func(c kubernetes.Interface, node, p string) error {
		_, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(p), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	const owner = `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"gone","uid":"6f1c1b8e-0000-4000-8000-000000000001"}]}}`
	const finalizer = `{"metadata":{"finalizers":["example.com/pin"]}}`
	waitPolicy(t, "no owner reference", func() error { return dry(asAgent, "node-a", owner) })
	waitPolicy(t, "no owner reference", func() error { return dry(asController, "node-a", owner) })
	for name, err := range map[string]error{
		"the agent set an owner reference on its own Node": dry(asAgent, "node-a", owner),
		"the agent set a finalizer on its own Node":        dry(asAgent, "node-a", finalizer),
		"the controller set an owner reference on a Node":  dry(asController, "node-b", owner),
		"the controller set a finalizer on a Node":         dry(asController, "node-b", finalizer),
		"the controller changed a Node's spec.externalID":  dry(asController, "node-b", `{"spec":{"externalID":"evil"}}`),
	} {
		if why := refused(err, ""); why != "" {
			t.Errorf("%s: %s", name, why)
		}
	}
	for name, err := range map[string]error{
		"the agent cordons its own Node":         patch(asAgent, "node-a", `{"spec":{"unschedulable":true}}`),
		"the agent labels its own Node":          patch(asAgent, "node-a", `{"metadata":{"labels":{"ops.slipway.dev/rootfs-version":"v2"}}}`),
		"the controller cordons a Node":          patch(asController, "node-b", `{"spec":{"unschedulable":true}}`),
		"the controller uncordons a Node":        patch(asController, "node-b", `{"spec":{"unschedulable":null}}`),
		"the controller writes a drain's record": patch(asController, "node-b", `{"metadata":{"annotations":{"drain.slipway.dev/cordoned-by":"slipway"}}}`),
	} {
		if err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
	}
	if n, err := kubernetes.NewForConfigOrDie(env.Config).CoreV1().Nodes().Get(ctx, "node-b", metav1.GetOptions{}); err != nil || len(n.OwnerReferences)+len(n.Finalizers) > 0 {
		t.Errorf("node-b: %v, owners %v, finalizers %v", err, n.OwnerReferences, n.Finalizers)
	}
}
