package controller

import (
	"context"
	"testing"

	authv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"slipway.dev/slipway/ops/swarm/manifest"
)

// TestRBACIsLeast asks the API server what the manifest's ServiceAccounts
// may do beyond what the controller and workers call (which the other tests
// exercise: the controller runs as its ServiceAccount there).
func TestRBACIsLeast(t *testing.T) {
	t.Parallel() // a namespace of its own (see TestMain)
	p := newPool(t, true)
	for _, tc := range []struct {
		sa      string
		attrs   authv1.ResourceAttributes
		allowed bool
	}{
		{manifest.ControllerName, authv1.ResourceAttributes{Verb: "delete", Resource: "pods", Namespace: p.ns}, true},
		{manifest.ControllerName, authv1.ResourceAttributes{Verb: "update", Group: "swarm.slipway.dev", Resource: "swarms", Subresource: "status", Namespace: p.ns}, true},
		{manifest.ControllerName, authv1.ResourceAttributes{Verb: "update", Group: "swarm.slipway.dev", Resource: "swarms", Namespace: p.ns}, false},
		{manifest.ControllerName, authv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: p.ns}, false},
		{manifest.ControllerName, authv1.ResourceAttributes{Verb: "delete", Resource: "configmaps", Namespace: p.ns}, false},
		{manifest.ControllerName, authv1.ResourceAttributes{Verb: "delete", Resource: "pods", Namespace: "default"}, false},
		{manifest.ControllerName, authv1.ResourceAttributes{Verb: "patch", Group: "apps", Resource: "statefulsets", Namespace: p.ns}, false},
		{manifest.WorkerName, authv1.ResourceAttributes{Verb: "patch", Resource: "pods", Namespace: p.ns}, true},
		{manifest.WorkerName, authv1.ResourceAttributes{Verb: "delete", Resource: "pods", Namespace: p.ns}, false},
		{manifest.WorkerName, authv1.ResourceAttributes{Verb: "get", Resource: "configmaps", Namespace: p.ns}, false},
	} {
		kc := kubernetes.NewForConfigOrDie(p.as(env.Config, tc.sa))
		attrs := tc.attrs
		r, err := kc.AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(),
			&authv1.SelfSubjectAccessReview{Spec: authv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed != tc.allowed {
			t.Errorf("%s %s %s/%s in %q: allowed %v, want %v", tc.sa, attrs.Verb, attrs.Resource, attrs.Subresource, attrs.Namespace, r.Status.Allowed, tc.allowed)
		}
	}
}
