package updateoperator

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"

	"slipway.dev/slipway/ops/testenv"
)

// Attacks with the tokens the operator's pods really get (bound to a pod
// on one node, with its node-name and pod-name claims): an agent that is
// taken over cannot write another Node, evict or delete pods, or read
// Secrets; the controller cannot delete pods or read Secrets. Each refusal
// is the API server's (RBAC: Forbidden; the ValidatingAdmissionPolicy of
// the manifest: Invalid/Forbidden naming the policy), never this code's.
func TestAttacksWithRealTokens(t *testing.T) {
	e := testenv.Need(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns, prefix = "uo-attack", "atk.update.slipway.dev"
	objs, err := ManifestObjects(ManifestOptions{Namespace: ns, Prefix: prefix, Platform: "bottlerocket-api"})
	if err != nil {
		t.Fatal(err)
	}
	kc := kubernetes.NewForConfigOrDie(e.Config)
	dyn := dynamic.NewForConfigOrDie(e.Config)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kc.Discovery()))
	for _, obj := range objs {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			t.Fatal(err)
		}
		apply(ctx, t, dyn, mapper, &unstructured.Unstructured{Object: u})
	}
	for _, n := range []string{"atk-own", "atk-other"} {
		if _, err := kc.CoreV1().Nodes().Create(ctx, testenv.FakeNode(n), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = kc.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}) })
	}
	pod := func(name, sa, node string) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PodSpec{ServiceAccountName: sa, NodeName: node,
			Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/fake"}}, Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}}
		if _, err := kc.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod("agent-on-own", AgentName, "atk-own")
	pod("controller-on-own", ControllerName, "atk-own")
	pod("victim", "default", "atk-other")
	if _, err := kc.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "loot"}, StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	as := func(podName string) *kubernetes.Clientset {
		cfg, err := testenv.PodToken(ctx, e.Config, ns, podName)
		if err != nil {
			t.Fatal(err)
		}
		return kubernetes.NewForConfigOrDie(cfg)
	}
	agent, controller := as("agent-on-own"), as("controller-on-own")
	annotate := func(c *kubernetes.Clientset, node string) error {
		data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{prefix + "/" + KeyActionState: "busy"}}})
		_, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, data, metav1.PatchOptions{})
		return err
	}
	// The policy is loaded a moment after its creation: wait for its first denial.
	eventually(t, 30*time.Second, "the admission policy refuses the agent another Node", func() (bool, string) {
		err := annotate(agent, "atk-other")
		return err != nil && strings.Contains(err.Error(), "only the Node it runs on"), errString(err)
	})
	if err := annotate(agent, "atk-own"); err != nil {
		t.Errorf("the agent's real token may not write its own Node's protocol: %v", err)
	}
	// The controller's keys, refused to the agent's token on its own Node:
	// a node that writes a future update-finished (or any gate) on itself
	// cannot pause, hold or release the fleet.
	for _, key := range []string{KeyFinished, KeyActionWanted, KeyTransition, KeyFailures, KeyLastFailure, KeyTargetVersion, KeyAhead} {
		data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{prefix + "/" + key: "2999-01-01T00:00:00Z"}}})
		_, err := agent.CoreV1().Nodes().Patch(ctx, "atk-own", types.MergePatchType, data, metav1.PatchOptions{})
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(errString(err), "may change only annotations") {
			t.Errorf("the agent's real token wrote the controller's %s on its own Node: %v", key, err)
		}
	}
	for _, key := range AgentAnnotations {
		data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{prefix + "/" + key: "x"}}})
		if _, err := agent.CoreV1().Nodes().Patch(ctx, "atk-own", types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
			t.Errorf("the agent's real token may not write its own %s: %v", key, err)
		}
	}
	if err := annotate(controller, "atk-other"); err != nil {
		t.Errorf("the controller's real token may not annotate a Node: %v", err)
	}
	for what, attempt := range map[string]func(*kubernetes.Clientset) error{
		"evict a pod": func(c *kubernetes.Clientset) error {
			return c.CoreV1().Pods(ns).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "victim", Namespace: ns}})
		},
		"delete a pod": func(c *kubernetes.Clientset) error {
			return c.CoreV1().Pods(ns).Delete(ctx, "victim", metav1.DeleteOptions{})
		},
		"read a Secret": func(c *kubernetes.Clientset) error {
			_, err := c.CoreV1().Secrets(ns).Get(ctx, "loot", metav1.GetOptions{})
			return err
		},
		"list Secrets": func(c *kubernetes.Clientset) error {
			_, err := c.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
			return err
		},
		"delete a Node": func(c *kubernetes.Clientset) error {
			return c.CoreV1().Nodes().Delete(ctx, "atk-other", metav1.DeleteOptions{})
		},
		"cordon a Node": func(c *kubernetes.Clientset) error { return patchSpec(ctx, c, "atk-own") },
	} {
		clients := map[string]*kubernetes.Clientset{"agent": agent}
		if what != "evict a pod" && what != "cordon a Node" { // the controller evicts and cordons by design
			clients["controller"] = controller
		}
		for who, c := range clients {
			err := attempt(c)
			if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
				t.Errorf("the %s's real token could %s (or was refused by something else than the API server): %v", who, what, err)
			}
		}
	}
	if _, err := kc.CoreV1().Pods(ns).Get(ctx, "victim", metav1.GetOptions{}); err != nil {
		t.Errorf("the victim pod is gone: %v", err)
	}
}

func patchSpec(ctx context.Context, c *kubernetes.Clientset, node string) error {
	_, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
	return err
}

func errString(err error) string {
	if err == nil {
		return "allowed"
	}
	return err.Error()
}
