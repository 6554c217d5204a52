package updateoperator

import (
	"context"
	"encoding/json"
	"fmt"
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
	// Room for the policies' load waits below (90 s each at most) on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
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
	for _, n := range []string{"atk-own", "atk-other", "atk-gc"} {
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
		t.Cleanup(func() {
			_ = kc.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
		})
	}
	pod("agent-on-own", AgentName, "atk-own")
	pod("controller-on-own", ControllerName, "atk-own")
	pod("victim", "default", "atk-other")
	if _, err := kc.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "loot"}, StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kc.CoreV1().Secrets(ns).Delete(context.Background(), "loot", metav1.DeleteOptions{}) })
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
	eventually(t, 90*time.Second, "the admission policy refuses the agent another Node", func() (bool, string) {
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
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(errString(err), "may change only the annotations") {
			t.Errorf("the agent's real token wrote the controller's %s on its own Node: %v", key, err)
		}
	}
	for _, key := range AgentAnnotations {
		data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{prefix + "/" + key: "x"}}})
		if _, err := agent.CoreV1().Nodes().Patch(ctx, "atk-own", types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
			t.Errorf("the agent's real token may not write its own %s: %v", key, err)
		}
	}
	for _, key := range ControllerAnnotations {
		data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{prefix + "/" + key: "x"}}})
		if _, err := controller.CoreV1().Nodes().Patch(ctx, "atk-other", types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
			t.Errorf("the controller's real token may not write its %s on a Node: %v", key, err)
		}
	}
	nodeMetaAttacks(ctx, t, kc, agent, controller, prefix)
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

// nodeMetaAttacks: what the Node policies refuse the controller's and the
// agent's real tokens beyond the keys: an ownerReference (the garbage
// collector would delete the Node, and every pod on it with it), a
// finalizer, a key that only begins like an allowed one, the other
// party's keys, a taint.
func nodeMetaAttacks(ctx context.Context, t *testing.T, admin, agent, controller *kubernetes.Clientset, prefix string) {
	t.Helper()
	// The controller's policy is loaded a moment after its creation too:
	// waited for until the API server refuses the probe (a timeout or a
	// dropped connection under load is no refusal), then the attacks go on
	// whatever the wait saw. Each probe writes a new value: once one is
	// allowed (the policy not loaded yet), the same value again changes
	// nothing, and an unchanged key is one the policy lets through.
	const policyLoad = 90 * time.Second
	refused := false
	var last error
	for try, deadline := 0, time.Now().Add(policyLoad); !refused && time.Now().Before(deadline); try++ {
		time.Sleep(200 * time.Millisecond)
		data, _ := json.Marshal(annotation("example.com/probe", fmt.Sprint(try)))
		_, last = controller.CoreV1().Nodes().Patch(ctx, "atk-other", types.MergePatchType, data, metav1.PatchOptions{})
		refused = apierrors.IsForbidden(last) || apierrors.IsInvalid(last)
	}
	if !refused {
		t.Errorf("the controller's real token is not refused an annotation outside the protocol on a Node after %s (last: %s): it has no Node policy", policyLoad, errString(last))
	}
	owner := map[string]any{"metadata": map[string]any{"ownerReferences": []any{map[string]any{
		"apiVersion": "v1", "kind": "Node", "name": "gone", "uid": "6a3c7b9e-0000-4000-8000-000000000001"}}}}
	for _, c := range []struct {
		who, node, what string
		as              *kubernetes.Clientset
		patch           map[string]any
	}{
		{"controller", "atk-gc", "an ownerReference on a Node", controller, owner},
		{"agent", "atk-gc", "an ownerReference on its own Node", agent, owner},
		{"controller", "atk-other", "a finalizer on a Node", controller, map[string]any{"metadata": map[string]any{"finalizers": []string{"example.com/pin"}}}},
		{"agent", "atk-own", "a finalizer on its own Node", agent, map[string]any{"metadata": map[string]any{"finalizers": []string{"example.com/pin"}}}},
		{"controller", "atk-other", "a node's report (action-state)", controller, annotation(prefix+"/"+KeyActionState, "ready")},
		{"controller", "atk-other", "an annotation outside the protocol", controller, annotation("example.com/x", "y")},
		{"controller", "atk-other", "a key that only begins like its own", controller, annotation(prefix+"/"+KeyActionWanted+"-x", "y")},
		{"agent", "atk-own", "a key that only begins like its own", agent, annotation(prefix+"/"+KeyReason+"-x", "y")},
		{"controller", "atk-other", "a label outside the protocol", controller, map[string]any{"metadata": map[string]any{"labels": map[string]any{"example.com/x": "y"}}}},
		{"controller", "atk-other", "a taint", controller, map[string]any{"spec": map[string]any{"taints": []any{map[string]any{"key": "x", "effect": "NoSchedule"}}}}},
	} {
		if c.as == agent && c.node == "atk-gc" {
			c.node = "atk-own" // its own Node is the only one it may write at all
		}
		data, _ := json.Marshal(c.patch)
		_, err := c.as.CoreV1().Nodes().Patch(ctx, c.node, types.MergePatchType, data, metav1.PatchOptions{})
		if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
			continue
		}
		t.Errorf("the %s's real token could write %s: %v", c.who, c.what, errString(err))
		if err == nil && c.patch["metadata"] != nil && c.patch["metadata"].(map[string]any)["ownerReferences"] != nil {
			gone := false
			for range 40 {
				if _, err := admin.CoreV1().Nodes().Get(ctx, c.node, metav1.GetOptions{}); apierrors.IsNotFound(err) {
					gone = true
					break
				}
				time.Sleep(250 * time.Millisecond)
			}
			if gone {
				t.Errorf("... and the garbage collector then deleted Node %s", c.node)
			}
		}
	}
	// A controller's legitimate writes still pass: its labels, a cordon.
	data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{prefix + "/" + KeyBeforeReboot: "true"}}})
	if _, err := controller.CoreV1().Nodes().Patch(ctx, "atk-other", types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
		t.Errorf("the controller's real token may not label a Node %s/%s: %v", prefix, KeyBeforeReboot, err)
	}
	if err := patchSpec(ctx, controller, "atk-other"); err != nil {
		t.Errorf("the controller's real token may not cordon a Node: %v", err)
	}
}

func annotation(k, v string) map[string]any {
	return map[string]any{"metadata": map[string]any{"annotations": map[string]any{k: v}}}
}
