package eds

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

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

// Issue 22 item 5 for the EDS controller: its `update` on every DaemonSet
// (the migration) is confined by a ValidatingAdmissionPolicy on its
// ServiceAccount to what the migration changes: with its real token, moving
// a DaemonSet off a node works, changing its image or giving it the host
// network is refused.
func TestControllerChangesDaemonSetsOnlyToMigrate(t *testing.T) {
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
	sel := map[string]string{"app": "victim"}
	victim := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "victim"}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: sel},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "d", Image: "good:1"}}}}}}
	if _, err := h.kube.AppsV1().DaemonSets(h.ns).Create(ctx, victim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	update := func(edit func(*appsv1.DaemonSet)) error {
		// The DaemonSet controller writes it too: retry a lost race.
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			ds, err := k.AppsV1().DaemonSets(h.ns).Get(ctx, "victim", metav1.GetOptions{})
			if err != nil {
				return err
			}
			edit(ds)
			_, err = k.AppsV1().DaemonSets(h.ns).Update(ctx, ds, metav1.UpdateOptions{})
			return err
		})
	}
	// The policy loads asynchronously: wait until it refuses, each try a new image.
	try := 0
	h.eventually(30*time.Second, "the image change refused", func() (bool, string) {
		try++
		err := update(func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = fmt.Sprintf("evil:%d", try) })
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "spec.template.spec.containers"), describe(err)
	})
	if err := update(func(ds *appsv1.DaemonSet) { excludeNodes(ds, []string{env.Nodes[0]}) }); err != nil {
		t.Errorf("the migration's own change refused: %v", err)
	}
	for name, edit := range map[string]func(*appsv1.DaemonSet){
		"the host network": func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.HostNetwork = true },
		"a hostPath volume": func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		},
		"another ServiceAccount": func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.ServiceAccountName = "admin" },
		"a toleration of every taint": func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		},
	} {
		if err := update(edit); !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want the policy's Forbidden", name, describe(err))
		}
	}
}
