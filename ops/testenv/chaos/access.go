package chaos

import (
	"context"
	"fmt"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The processes under chaos run with the rights their manifests grant, as
// in a cluster: each system applies its manifest's ServiceAccounts, RBAC
// and admission policies (applyAccess), and its controllers reach the API
// server with a token of their ServiceAccount (tokenKubeconfig); workers
// with a token bound to their pod (testenv.PodToken). The monitor and the
// fault injector keep the admin credentials: they read everything and
// play the kubelet and the node lifecycle (a Node's status, a pod's
// deletion), which no component's rights allow.

// applyAccess creates the ServiceAccounts, Roles, ClusterRoles, their
// bindings and the admission policies among objs (a manifest's objects;
// the others, CRDs and Deployments, are skipped: the run installs the CRDs
// and runs the controllers itself). Namespaces are created too.
func applyAccess(ctx context.Context, kc kubernetes.Interface, objs []any) error {
	for _, obj := range objs {
		var err error
		switch o := obj.(type) {
		case *corev1.Namespace:
			_, err = kc.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
		case *corev1.ServiceAccount:
			_, err = kc.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = kc.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = kc.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = kc.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = kc.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *admissionv1.ValidatingAdmissionPolicy:
			_, err = kc.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{})
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			_, err = kc.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, metav1.CreateOptions{})
		default:
			continue
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("apply the manifest's %T: %w", obj, err)
		}
	}
	return nil
}

// tokenKubeconfig writes a kubeconfig at path that reaches server (a
// fault proxy) with a token of the ServiceAccount ns/sa, as a pod of it
// mounts one (not bound to a pod: the controllers are run by the runner).
func tokenKubeconfig(ctx context.Context, kc kubernetes.Interface, admin *rest.Config, ns, sa, path, server string) error {
	expiry := int64(4 * 3600)
	tr, err := kc.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("request a token of %s/%s: %w", ns, sa, err)
	}
	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken = tr.Status.Token
	return writeKubeconfig(path, cfg, server)
}
