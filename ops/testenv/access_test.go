package testenv

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"slipway.dev/slipway/ops/manifest"
)

// TestCreateAccessAppliesTheManifestTwice: every kind the manifest's
// access objects hold is created, applying them again is no error, and an
// object of a kind it has no client for is refused by name.
func TestCreateAccessAppliesTheManifestTwice(t *testing.T) {
	cs := clientset(t)
	ctx := context.Background()
	objs := manifest.AccessObjects(manifest.Options{Namespace: "access-test", Image: "slipway:test"})
	t.Cleanup(func() { removeClusterScoped(t, cs, objs) }) // the package's other tests share the cluster
	for range 2 {
		if err := CreateAccess(ctx, cs, objs); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.CoreV1().ServiceAccounts("access-test").Get(ctx, manifest.AgentName, metav1.GetOptions{}); err != nil {
		t.Errorf("the agent's ServiceAccount: %v", err)
	}
	policies, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().List(ctx, metav1.ListOptions{})
	if err != nil || len(policies.Items) == 0 {
		t.Errorf("no admission policy bindings after CreateAccess (%v)", err)
	}
	err = CreateAccess(ctx, cs, []any{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "access-test"}}})
	if err == nil || !strings.Contains(err.Error(), "*v1.ConfigMap") {
		t.Errorf("a ConfigMap: got %v, want an error naming *v1.ConfigMap", err)
	}
}

// removeClusterScoped deletes the cluster-scoped objects among objs.
func removeClusterScoped(t *testing.T, cs kubernetes.Interface, objs []any) {
	ctx, o := context.Background(), metav1.DeleteOptions{}
	for _, obj := range objs {
		var err error
		switch v := obj.(type) {
		case *rbacv1.ClusterRole:
			err = cs.RbacV1().ClusterRoles().Delete(ctx, v.Name, o)
		case *rbacv1.ClusterRoleBinding:
			err = cs.RbacV1().ClusterRoleBindings().Delete(ctx, v.Name, o)
		case *admissionv1.ValidatingAdmissionPolicy:
			err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, v.Name, o)
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, v.Name, o)
		}
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("remove %T: %v", obj, err)
		}
	}
}

// TestWriteKubeconfigAsActsAsTheIdentity: the API server takes a client of
// the written kubeconfig for the identity, groups included.
func TestWriteKubeconfigAsActsAsTheIdentity(t *testing.T) {
	env := Need(t, cluster)
	id := ServiceAccount("access-test", "controller")
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := WriteKubeconfigAs(env.Config, id, path); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	review, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ui := review.Status.UserInfo
	if ui.Username != id.User || !slices.Contains(ui.Groups, "system:serviceaccounts:access-test") {
		t.Errorf("acting as %q in %v, want %q in %v", ui.Username, ui.Groups, id.User, id.Groups)
	}
}
