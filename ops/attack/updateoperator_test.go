package attack

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"slipway.dev/slipway/ops/testenv"
	uo "slipway.dev/slipway/ops/updateoperator"
)

// The update operator's ServiceAccounts with the tokens their pods really
// get (ops/updateoperator's TestAttacksWithRealTokens covers another
// Node's annotations, evictions, pod deletion, Secrets and Node deletion):
// an agent cannot label or cordon another Node nor touch any Lease; the
// controller writes only its own election Lease, not another of its
// namespace nor a node's heartbeat Lease.
func TestUpdateOperatorTokensReachOnlyTheirOwn(t *testing.T) {
	e := testenv.Need(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "uo-attack-own"
	apply(ctx, t, e.Config, uoRules(t, ns))
	kc := kubernetes.NewForConfigOrDie(e.Config)
	for _, n := range []string{"uoa-own", "uoa-other"} {
		if _, err := kc.CoreV1().Nodes().Create(ctx, testenv.FakeNode(n), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = kc.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}) })
	}
	for _, p := range []struct{ name, sa string }{{"agent-on-own", uo.AgentName}, {"controller-on-own", uo.ControllerName}} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: ns}, Spec: corev1.PodSpec{ServiceAccountName: p.sa, NodeName: "uoa-own",
			Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/fake"}}, Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}}
		if _, err := kc.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	leases := map[string]string{uo.LeaseName: ns, "another-component": ns, "uoa-other": corev1.NamespaceNodeLease}
	for name, lns := range leases {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: lns}}
		if _, err := kc.CoordinationV1().Leases(lns).Create(ctx, l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = kc.CoordinationV1().Leases(lns).Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	as := func(pod string) *kubernetes.Clientset {
		cfg, err := testenv.PodToken(ctx, e.Config, ns, pod)
		if err != nil {
			t.Fatal(err)
		}
		return kubernetes.NewForConfigOrDie(cfg)
	}
	agent, controller := as("agent-on-own"), as("controller-on-own")
	patchNode := func(c *kubernetes.Clientset, node string, patch map[string]any) error {
		data, _ := json.Marshal(patch)
		_, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, data, metav1.PatchOptions{})
		return err
	}
	label := map[string]any{"metadata": map[string]any{"labels": map[string]any{uo.DefaultPrefix + "/exclude": "true"}}}
	// The policy is loaded a moment after its creation: wait for its first denial.
	deadline := time.Now().Add(30 * time.Second)
	for err := patchNode(agent, "uoa-other", label); err == nil || !strings.Contains(err.Error(), "only the Node it runs on"); err = patchNode(agent, "uoa-other", label) {
		if time.Now().After(deadline) {
			t.Fatalf("the agent's token labels another Node: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	renew := func(c *kubernetes.Clientset, lns, name string) error {
		l, err := c.CoordinationV1().Leases(lns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		who := "attacker"
		l.Spec.HolderIdentity = &who
		_, err = c.CoordinationV1().Leases(lns).Update(ctx, l, metav1.UpdateOptions{})
		return err
	}
	refused := map[string]func() error{
		"the agent cordons another Node": func() error {
			return patchNode(agent, "uoa-other", map[string]any{"spec": map[string]any{"unschedulable": true}})
		},
		"the agent takes the controller's Lease": func() error { return renew(agent, ns, uo.LeaseName) },
		"the agent creates a Lease": func() error {
			_, err := agent.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "squat"}}, metav1.CreateOptions{})
			return err
		},
		"the agent renews another node's heartbeat":           func() error { return renew(agent, corev1.NamespaceNodeLease, "uoa-other") },
		"the controller takes another Lease of its namespace": func() error { return renew(controller, ns, "another-component") },
		"the controller renews a node's heartbeat":            func() error { return renew(controller, corev1.NamespaceNodeLease, "uoa-other") },
	}
	for what, attempt := range refused {
		if err := attempt(); !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
			t.Errorf("%s: not refused by the API server: %v", what, errOrAllowed(err))
		}
	}
	if err := renew(controller, ns, uo.LeaseName); err != nil {
		t.Errorf("the controller's token may not renew its own Lease: %v", err)
	}
}

func errOrAllowed(err error) string {
	if err == nil {
		return "allowed"
	}
	return err.Error()
}
