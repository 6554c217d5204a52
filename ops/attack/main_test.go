package attack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/crds"
	"slipway.dev/slipway/ops/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.RunMain(m, testenv.Options{CRDs: crds.Must()}, &env)) }

// apply creates or replaces objs (typed manifest objects) as the administrator.
func apply(ctx context.Context, t *testing.T, cfg *rest.Config, objs []any) {
	t.Helper()
	dyn := dynamic.NewForConfigOrDie(cfg)
	for _, obj := range objs {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		gvk := u.GroupVersionKind()
		var ri dynamic.ResourceInterface = dyn.Resource(resourceOf(t, gvk))
		if u.GetNamespace() != "" {
			ri = dyn.Resource(resourceOf(t, gvk)).Namespace(u.GetNamespace())
		}
		data, err := u.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		force := true
		if _, err := ri.Patch(ctx, u.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "attack-test", Force: &force}); err != nil {
			t.Fatalf("apply %s %s: %v", gvk.Kind, u.GetName(), err)
		}
	}
}

// resourceOf maps the few kinds the manifest holds (no discovery needed).
func resourceOf(t *testing.T, gvk schema.GroupVersionKind) schema.GroupVersionResource {
	t.Helper()
	plural := map[string]string{
		"Namespace": "namespaces", "ServiceAccount": "serviceaccounts", "ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings",
		"Role": "roles", "RoleBinding": "rolebindings", "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
		"ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings", "PriorityClass": "priorityclasses",
		"UpdateChannel": "updatechannels",
	}[gvk.Kind]
	if plural == "" {
		t.Fatalf("no resource known for kind %s", gvk.Kind)
	}
	return gvk.GroupVersion().WithResource(plural)
}

// podOn creates node (if missing) and a pod of serviceAccount on it in ns
// that holds a component's identity, and returns the config its bound
// token gives.
func podOn(ctx context.Context, t *testing.T, ns, serviceAccount, node string) *rest.Config {
	t.Helper()
	admin := kubernetes.NewForConfigOrDie(env.Config)
	if _, err := admin.CoreV1().Nodes().Create(ctx, testenv.FakeNode(node), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	name := serviceAccount + "-" + node
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PodSpec{
		ServiceAccountName: serviceAccount, NodeName: node,
		Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cfg, err := testenv.PodToken(ctx, env.Config, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// refused says why err is the API server's refusal of an attack: RBAC
// (Forbidden without a policy's name) or an admission policy (its
// message holds want). "" when it is that refusal.
func refused(err error, want string) string {
	switch {
	case err == nil:
		return "allowed"
	case !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err):
		return "failed otherwise: " + err.Error()
	case want != "" && !strings.Contains(err.Error(), want):
		return "refused, but not by " + want + ": " + err.Error()
	}
	return ""
}

// waitPolicy waits until the policies the API server loads a moment after
// their creation refuse probe (its error holds want).
func waitPolicy(t *testing.T, want string, probe func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := probe()
		if err != nil && strings.Contains(err.Error(), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the admission policy never refused the probe (%v): is it loaded?", errors.Join(err, fmt.Errorf("want %q", want)))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
