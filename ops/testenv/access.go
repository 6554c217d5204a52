package testenv

import (
	"context"
	"fmt"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// CreateAccess creates access objects, as manifest.AccessObjects renders
// them (namespaces, ServiceAccounts, RBAC, admission policies and their
// bindings), in their order; one that exists already counts as created, so
// a harness may apply them again. An object of another kind is an error,
// not skipped: a kind the manifest adds must not go missing from a test's
// cluster unnoticed.
func CreateAccess(ctx context.Context, c kubernetes.Interface, objs []any) error {
	o := metav1.CreateOptions{}
	for _, obj := range objs {
		var err error
		switch v := obj.(type) {
		case *corev1.Namespace:
			_, err = c.CoreV1().Namespaces().Create(ctx, v, o)
		case *corev1.ServiceAccount:
			_, err = c.CoreV1().ServiceAccounts(v.Namespace).Create(ctx, v, o)
		case *rbacv1.ClusterRole:
			_, err = c.RbacV1().ClusterRoles().Create(ctx, v, o)
		case *rbacv1.ClusterRoleBinding:
			_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, v, o)
		case *rbacv1.Role:
			_, err = c.RbacV1().Roles(v.Namespace).Create(ctx, v, o)
		case *rbacv1.RoleBinding:
			_, err = c.RbacV1().RoleBindings(v.Namespace).Create(ctx, v, o)
		case *admissionv1.ValidatingAdmissionPolicy:
			_, err = c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, v, o)
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			_, err = c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, v, o)
		default:
			return fmt.Errorf("create access objects: no client for %T (add its kind to testenv.CreateAccess)", obj)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create access object %T: %w", obj, err)
		}
	}
	return nil
}

// WriteKubeconfigAs writes at path a kubeconfig that reaches cfg's API
// server with cfg's bearer token and acts as id (impersonation), as a
// process started by a test reaches the cluster under one of the
// manifest's identities: `slipway ops controller` as the controller's
// ServiceAccount, say. cfg is the cluster's admin config (Env.Config).
func WriteKubeconfigAs(cfg *rest.Config, id *Identity, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["testenv"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["as"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken, Impersonate: id.User, ImpersonateGroups: id.Groups}
	kc.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: "as"}
	kc.CurrentContext = "testenv"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write a kubeconfig acting as %s: %w", id.User, err)
	}
	return nil
}
