package manifest

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	authv1 "k8s.io/api/authorization/v1"
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
	sa := "system:serviceaccount:slipway-test:" + AgentName
	// The agent's --install-crds runs crds.Apply with exactly these rights.
	asAgent := rest.CopyConfig(e.Config)
	asAgent.Impersonate = rest.ImpersonationConfig{UserName: sa}
	if err := crds.Apply(ctx, asAgent, "ops.slipway.dev"); err != nil {
		t.Errorf("crds.Apply as the agent's ServiceAccount: %v", err)
	}
	allowed := []authv1.ResourceAttributes{
		{Verb: "patch", Resource: "nodes"},
		{Verb: "create", Resource: "pods", Subresource: "eviction", Namespace: "default"},
		{Verb: "list", Resource: "pods"},
		{Verb: "create", Group: "batch", Resource: "jobs", Namespace: "slipway-test"},
		{Verb: "update", Group: "ops.slipway.dev", Resource: "updatechannels", Subresource: "status", Namespace: "slipway-test"},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "slipway-test"},
		{Verb: "create", Resource: "events", Namespace: "default"},
		{Verb: "patch", Group: "ops.slipway.dev", Resource: "updatechannels", Subresource: "status", Namespace: "slipway-test"},
		{Verb: "watch", Group: "ops.slipway.dev", Resource: "updatechannels", Namespace: "slipway-test"},
		{Verb: "delete", Resource: "pods", Namespace: "default"},
		{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: "slipway-test"},
		{Verb: "watch", Resource: "pods", Namespace: "slipway-test"},
	}
	denied := []authv1.ResourceAttributes{
		{Verb: "get", Resource: "secrets", Namespace: "slipway-test"},
		{Verb: "create", Group: "batch", Resource: "jobs", Namespace: "default"},
		{Verb: "delete", Resource: "nodes"},
		{Verb: "delete", Group: "ops.slipway.dev", Resource: "updatechannels", Namespace: "slipway-test"},
		// Least privilege: verbs the agent never calls are not granted.
		{Verb: "update", Resource: "nodes"},
		{Verb: "watch", Resource: "pods"},
		{Verb: "delete", Group: "batch", Resource: "jobs", Namespace: "slipway-test"},
		{Verb: "update", Group: "ops.slipway.dev", Resource: "updatechannels", Namespace: "slipway-test"},
		{Verb: "list", Group: "coordination.k8s.io", Resource: "leases", Namespace: "slipway-test"},
		{Verb: "get", Group: "apps", Resource: "daemonsets", Namespace: "default"},
	}
	for _, want := range []struct {
		attrs []authv1.ResourceAttributes
		ok    bool
	}{{allowed, true}, {denied, false}} {
		for _, a := range want.attrs {
			review, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authv1.SubjectAccessReview{
				Spec: authv1.SubjectAccessReviewSpec{User: sa, ResourceAttributes: &a},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if review.Status.Allowed != want.ok {
				t.Errorf("%s %s/%s/%s in %q: allowed = %v, want %v", a.Verb, a.Group, a.Resource, a.Subresource, a.Namespace, review.Status.Allowed, want.ok)
			}
		}
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
