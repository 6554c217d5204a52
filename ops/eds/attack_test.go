package eds

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"slipway.dev/slipway/ops/generated/eds/clientset/versioned"
	"slipway.dev/slipway/ops/testenv"
)

// Issue 22 item 5 for the EDS controller: with the token its pod really
// gets (bound to a pod of its ServiceAccount), the API server refuses what
// the controller does not need. The controller's code plays no part.
func TestControllerTokenHasOnlyWhatItNeeds(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t)
	h.installManifestRBAC()
	ctx := context.Background()
	holder := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "controller"},
		Spec: corev1.PodSpec{ServiceAccountName: controllerName, Containers: []corev1.Container{{Name: "c", Image: "img:1"}}}}
	if _, err := h.kube.CoreV1().Pods(h.ns).Create(ctx, holder, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := testenv.PodToken(ctx, env.Config, h.ns, "controller")
	if err != nil {
		t.Fatal(err)
	}
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e, err := versioned.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.create(daemon("agent", "agent:v1"))
	// What it needs works with this token (so the refusals below are RBAC's).
	if _, err := e.EdsV1alpha1().ExtendedDaemonSets(h.ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("the controller's token cannot list ExtendedDaemonSets: %v", err)
	}
	if _, err := k.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("the controller's token cannot list pods: %v", err)
	}
	merge := func(s string) []byte { return []byte(s) }
	attacks := map[string]func() error{
		"read a Secret": func() error {
			_, err := k.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
			return err
		},
		"read a ConfigMap": func() error {
			_, err := k.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{})
			return err
		},
		"label a Node": func() error {
			_, err := k.CoreV1().Nodes().Patch(ctx, env.Nodes[0], types.MergePatchType, merge(`{"metadata":{"labels":{"owned":"yes"}}}`), metav1.PatchOptions{})
			return err
		},
		"change a pod's labels": func() error {
			_, err := k.CoreV1().Pods(h.ns).Patch(ctx, "controller", types.MergePatchType, merge(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
			return err
		},
		"exec into a pod": func() error {
			return k.CoreV1().RESTClient().Post().Namespace(h.ns).Resource("pods").Name("controller").SubResource("exec").Do(ctx).Error()
		},
		"delete an ExtendedDaemonSet": func() error {
			return e.EdsV1alpha1().ExtendedDaemonSets(h.ns).Delete(ctx, "agent", metav1.DeleteOptions{})
		},
		"create an ExtendedDaemonSet": func() error {
			_, err := e.EdsV1alpha1().ExtendedDaemonSets(h.ns).Create(ctx, daemon("mine", "evil:1"), metav1.CreateOptions{})
			return err
		},
		"write a setting's spec": func() error {
			return e.EdsV1alpha1().RESTClient().Post().Namespace(h.ns).Resource("extendeddaemonsetsettings").
				Body([]byte(`{"apiVersion":"eds.slipway.dev/v1alpha1","kind":"ExtendedDaemonsetSetting","metadata":{"name":"x"},"spec":{"reference":{"kind":"ExtendedDaemonSet","name":"agent"},"nodeSelector":{}}}`)).
				SetHeader("Content-Type", "application/json").Do(ctx).Error()
		},
		"bind itself cluster-admin": func() error {
			_, err := k.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "escalate-" + h.ns},
				RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
				Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: controllerName, Namespace: h.ns}}}, metav1.CreateOptions{})
			return err
		},
		"create a DaemonSet": func() error {
			return k.AppsV1().RESTClient().Post().Namespace(h.ns).Resource("daemonsets").
				Body([]byte(`{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"x"}}`)).SetHeader("Content-Type", "application/json").Do(ctx).Error()
		},
		"change the CRDs": func() error {
			return k.RESTClient().Delete().AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/extendeddaemonsets.eds.slipway.dev").Do(ctx).Error()
		},
		"impersonate an administrator": func() error {
			imp := *cfg
			imp.Impersonate.UserName = "system:admin"
			ki, err := kubernetes.NewForConfig(&imp)
			if err != nil {
				return err
			}
			_, err = ki.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
			return err
		},
	}
	for name, attack := range attacks {
		if err := attack(); !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want the API server's Forbidden", name, describe(err))
		}
	}
}

func describe(err error) string {
	if err == nil {
		return "allowed"
	}
	return fmt.Sprintf("%v", err)
}
