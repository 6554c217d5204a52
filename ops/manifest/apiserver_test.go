package manifest

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"slipway.dev/slipway/ops/admission"
	"slipway.dev/slipway/ops/crds"
	"slipway.dev/slipway/ops/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.RunMain(m, testenv.Options{}, &env)) }

// TestAPIServerAcceptsTheManifest applies every document of the rendered
// manifest the way k3s's deploy controller does (server-side apply), then
// asks the API server what the agent's ServiceAccount may do.
func TestAPIServerAcceptsTheManifest(t *testing.T) {
	e := testenv.Need(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	body, err := Render(Options{Namespace: "slipway-test"})
	if err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(e.Config)
	dyn := dynamic.NewForConfigOrDie(e.Config)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery()))
	for _, obj := range decodeAll(t, body) {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			t.Fatal(err)
		}
		applyOne(ctx, t, dyn, mapper, &unstructured.Unstructured{Object: u})
		if crd, ok := obj.(*apiextv1.CustomResourceDefinition); ok {
			if err := crds.WaitEstablished(ctx, e.Config, crd.Name); err != nil {
				t.Fatal(err)
			}
			mapper.Reset()
		}
	}
	sa := AgentUser("slipway-test")
	allowed := []authv1.ResourceAttributes{
		{Verb: "patch", Resource: "nodes"},
		{Verb: "create", Group: "batch", Resource: "jobs", Namespace: "slipway-test"},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "slipway-test"},
		{Verb: "create", Resource: "events", Namespace: "default"},
		{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: "slipway-test"},
		{Verb: "watch", Resource: "pods", Namespace: "slipway-test"},
		// Its slot Pods (the policies admit only its own node's).
		{Verb: "create", Resource: "pods", Namespace: "slipway-test"},
		{Verb: "delete", Resource: "pods", Namespace: "slipway-test"},
	}
	denied := []authv1.ResourceAttributes{
		{Verb: "get", Resource: "secrets", Namespace: "slipway-test"},
		{Verb: "get", Resource: "secrets", Name: DefaultTokenSecret, Namespace: "slipway-test"},
		// The controller writes channel status; the agent reports on its own Node.
		{Verb: "update", Group: "ops.slipway.dev", Resource: "updatechannels", Subresource: "status", Namespace: "slipway-test"},
		{Verb: "patch", Group: "ops.slipway.dev", Resource: "updatechannels", Subresource: "status", Namespace: "slipway-test"},
		{Verb: "create", Group: "batch", Resource: "jobs", Namespace: "default"},
		{Verb: "delete", Resource: "nodes"},
		{Verb: "delete", Group: "ops.slipway.dev", Resource: "updatechannels", Namespace: "slipway-test"},
		// No pod of the cluster: the controller drains.
		{Verb: "create", Resource: "pods", Subresource: "eviction", Namespace: "default"},
		{Verb: "list", Resource: "pods"},
		{Verb: "delete", Resource: "pods", Namespace: "default"},
		// No channel at all: the controller writes what a node needs on its Node.
		{Verb: "get", Group: "ops.slipway.dev", Resource: "updatechannels", Namespace: "slipway-test"},
		{Verb: "list", Group: "ops.slipway.dev", Resource: "updatechannels", Namespace: "slipway-test"},
		{Verb: "watch", Group: "ops.slipway.dev", Resource: "updatechannels", Namespace: "slipway-test"},
		// Least privilege: verbs the agent never calls are not granted.
		{Verb: "update", Resource: "nodes"},
		{Verb: "watch", Resource: "pods"},
		{Verb: "delete", Group: "batch", Resource: "jobs", Namespace: "slipway-test"},
		{Verb: "update", Resource: "pods", Namespace: "slipway-test"},
		{Verb: "patch", Resource: "pods", Namespace: "slipway-test"},
		{Verb: "deletecollection", Resource: "pods", Namespace: "slipway-test"},
		{Verb: "create", Resource: "pods", Subresource: "exec", Namespace: "slipway-test"},
		{Verb: "create", Resource: "pods", Subresource: "eviction", Namespace: "slipway-test"},
		{Verb: "create", Resource: "pods", Namespace: "default"},
		{Verb: "update", Group: "ops.slipway.dev", Resource: "updatechannels", Namespace: "slipway-test"},
		{Verb: "list", Group: "coordination.k8s.io", Resource: "leases", Namespace: "slipway-test"},
		{Verb: "get", Group: "apps", Resource: "daemonsets", Namespace: "default"},
		// Without --install-crds the manifest carries the CRD; the agent writes none.
		{Verb: "create", Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"},
		{Verb: "update", Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"},
	}
	checkAccess(ctx, t, kube, sa, allowed, denied)
	ctrl := ControllerUser("slipway-test")
	checkAccess(ctx, t, kube, ctrl, []authv1.ResourceAttributes{
		{Verb: "list", Resource: "nodes"},
		{Verb: "get", Resource: "nodes"},
		{Verb: "update", Group: "ops.slipway.dev", Resource: "updatechannels", Subresource: "status", Namespace: "slipway-test"},
		{Verb: "watch", Group: "ops.slipway.dev", Resource: "updatechannels", Namespace: "slipway-test"},
		{Verb: "get", Resource: "secrets", Name: DefaultTokenSecret, Namespace: "slipway-test"},
		{Verb: "get", Group: "batch", Resource: "jobs", Namespace: "slipway-test"},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "slipway-test"},
		{Verb: "create", Resource: "events", Namespace: "slipway-test"},
		{Verb: "patch", Resource: "nodes"}, // the channel views and its cordon; controllerNodePolicy admits nothing else
		{Verb: "create", Resource: "pods", Subresource: "eviction", Namespace: "default"},
		{Verb: "list", Resource: "pods"},
		{Verb: "delete", Resource: "pods", Namespace: "default"},
	}, []authv1.ResourceAttributes{
		{Verb: "update", Resource: "nodes"},
		{Verb: "get", Resource: "secrets", Name: "other", Namespace: "slipway-test"},
		{Verb: "list", Resource: "secrets", Namespace: "slipway-test"},
		{Verb: "create", Group: "batch", Resource: "jobs", Namespace: "slipway-test"},
		{Verb: "update", Group: "ops.slipway.dev", Resource: "updatechannels", Namespace: "slipway-test"},
		{Verb: "patch", Group: "ops.slipway.dev", Resource: "updatechannels", Subresource: "status", Namespace: "slipway-test"},
	})
	checkRestricted(ctx, t, kube)
}

// checkAccess asks the API server whether user may do each of allowed and none of denied.
func checkAccess(ctx context.Context, t *testing.T, kube kubernetes.Interface, user string, allowed, denied []authv1.ResourceAttributes) {
	t.Helper()
	for _, want := range []struct {
		attrs []authv1.ResourceAttributes
		ok    bool
	}{{allowed, true}, {denied, false}} {
		for _, a := range want.attrs {
			review, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authv1.SubjectAccessReview{
				Spec: authv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &a},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if review.Status.Allowed != want.ok {
				t.Errorf("%s: %s %s/%s/%s %s in %q: allowed = %v, want %v", user, a.Verb, a.Group, a.Resource, a.Subresource, a.Name, a.Namespace, review.Status.Allowed, want.ok)
			}
		}
	}
}

// checkRestricted: the controller's pod is admitted in a namespace that
// enforces Pod Security's restricted level (a dry run).
func checkRestricted(ctx context.Context, t *testing.T, kube kubernetes.Interface) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "slipway-restricted", Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns.Name}}
	if _, err := kube.CoreV1().ServiceAccounts(ns.Name).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	o := Options{Namespace: ns.Name}.WithDefaults()
	dryRun := func(spec corev1.PodSpec) error {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns.Name}, Spec: spec}
		pod.Spec.ServiceAccountName = "default"
		_, err := kube.CoreV1().Pods(ns.Name).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	if err := dryRun(daemonSet(o).Spec.Template.Spec); err == nil {
		t.Errorf("the agent's pod passed Pod Security restricted: the namespace does not enforce it")
	}
	if err := dryRun(deployment(o).Spec.Template.Spec); err != nil {
		t.Errorf("the controller's pod in a namespace at Pod Security restricted: %v", err)
	}
}

// TestAgentMayPatchOnlyItsOwnNode: the manifest's admission policy lets an
// agent cordon its own Node and write slipway's keys on it, and refuses
// any other Node and anything else on its own.
func TestAgentMayPatchOnlyItsOwnNode(t *testing.T) {
	e := testenv.Need(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := Options{Namespace: "slipway-own"}
	kube := kubernetes.NewForConfigOrDie(e.Config)
	applyObjects(ctx, t, e, append(append([]any{namespace(o)}, rbac(o)...), ownNodePolicy(o).Objects()...))
	for _, n := range []string{"own", "other"} {
		node := testenv.FakeNode(n)
		node.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}}
		if _, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = kube.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}) })
	}
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: AgentUser(o.Namespace), Groups: []string{"system:serviceaccounts", "system:authenticated"},
		Extra: map[string][]string{admission.NodeNameExtra: {"own"}}}
	asAgent := kubernetes.NewForConfigOrDie(cfg)
	patch := func(node, body string) error {
		_, err := asAgent.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(body), metav1.PatchOptions{})
		return err
	}
	const cordon = `{"spec":{"unschedulable":true},"metadata":{"annotations":{"drain.slipway.dev/cordoned-by":"slipway-agent"},"labels":{"ops.slipway.dev/rootfs-version":"v2"}}}`
	// The policy is loaded a moment after its creation: wait for its first denial.
	deadline := time.Now().Add(30 * time.Second)
	for err := patch("other", cordon); err == nil || !strings.Contains(err.Error(), "only the Node it runs on"); err = patch("other", cordon) {
		if time.Now().After(deadline) {
			t.Fatalf("a patch of another Node: %v, want refused by the policy", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := patch("own", cordon); err != nil {
		t.Errorf("the agent may not cordon its own Node and label it: %v", err)
	}
	for what, body := range map[string]string{
		"drop a taint of":             `{"spec":{"taints":null}}`,
		"set a foreign label on":      `{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":"true"}}}`,
		"set a foreign annotation on": `{"metadata":{"annotations":{"example.com/owner":"me"}}}`,
		"remove a foreign label of":   `{"metadata":{"labels":{"kubernetes.io/hostname":null}}}`,
	} {
		if err := patch("own", body); err == nil {
			t.Errorf("the agent could %s its own Node", what)
		}
	}
}

// applyObjects applies typed objects with server-side apply.
func applyObjects(ctx context.Context, t *testing.T, e *testenv.Env, objs []any) {
	t.Helper()
	kube := kubernetes.NewForConfigOrDie(e.Config)
	dyn := dynamic.NewForConfigOrDie(e.Config)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery()))
	for _, obj := range objs {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			t.Fatal(err)
		}
		applyOne(ctx, t, dyn, mapper, &unstructured.Unstructured{Object: u})
	}
}

func applyOne(ctx context.Context, t *testing.T, dyn dynamic.Interface, mapper *restmapper.DeferredDiscoveryRESTMapper, u *unstructured.Unstructured) {
	t.Helper()
	gvk := u.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatalf("map %s: %v", gvk, err)
	}
	data, err := json.Marshal(u)
	if err != nil {
		t.Fatal(err)
	}
	var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
	if u.GetNamespace() != "" {
		ri = dyn.Resource(m.Resource).Namespace(u.GetNamespace())
	}
	force := true
	if _, err := ri.Patch(ctx, u.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "slipway-test", Force: &force}); err != nil {
		t.Fatalf("apply %s %s: %v", gvk.Kind, u.GetName(), err)
	}
}
