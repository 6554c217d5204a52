package eds

import (
	"bytes"
	"context"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
)

func TestManifestParsesIntoItsObjects(t *testing.T) {
	var out bytes.Buffer
	if err := WriteManifest(ManifestOptions{Namespace: "ops", Image: "img:1", Out: &out}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kind: CustomResourceDefinition", "name: extendeddaemonsets.eds.slipway.dev", "kind: ClusterRole",
		"kind: Deployment", "- --leader-elect", "image: img:1", "namespace: ops",
		"path: /healthz", "path: /readyz"} { // issue 27 item 2: the probes
		if !strings.Contains(out.String(), want) {
			t.Errorf("manifest lacks %q", want)
		}
	}
	if err := WriteManifest(ManifestOptions{Out: &out}); err == nil {
		t.Error("a manifest without namespace and image was written")
	}
}

// TestControllerRunsWithTheManifestRBAC runs a controller as the manifest's
// ServiceAccount (impersonated), bound to exactly the manifest's roles: it
// rolls a canary out and fails another, so every permission it needs is granted.
func TestControllerRunsWithTheManifestRBAC(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t)
	h.installManifestRBAC()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + h.ns + ":" + controllerName}
	h.startController(Options{Config: cfg, LeaderElect: true, LeaseNamespace: h.ns})
	h.create(withCanary(daemon("agent", "agent:v1"), 3*time.Second)) // long enough for the state Canary to be seen on a loaded machine
	h.rolledOut("agent", "agent:v1", clusterNodes)
	h.setImage("agent", "agent:v2")
	h.rolledOut("agent", "agent:v2", clusterNodes)
	h.setImage("agent", "agent:v3")
	e := h.waitState("agent", v1.StateCanary, 20*time.Second)
	h.crash(h.canaryPod("agent", e.Status.Canary.ReplicaSet).Name, 9)
	h.rolledOutState("agent", "agent:v2", clusterNodes, v1.StateCanaryFailed)
}

// installManifestRBAC creates the manifest's ServiceAccount, roles and
// bindings for the test's namespace (cluster-wide objects renamed for it).
func (h *harness) installManifestRBAC() {
	t := h.t
	t.Helper()
	ctx := context.Background()
	objs, err := ManifestObjects(ManifestOptions{Namespace: h.ns, Image: "img:1"})
	if err != nil {
		t.Fatal(err)
	}
	suffix := "-" + h.ns
	for _, o := range objs {
		switch r := o.(type) {
		case *corev1.ServiceAccount:
			if _, err := h.kube.CoreV1().ServiceAccounts(h.ns).Create(ctx, r, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		case *rbacv1.ClusterRole:
			r.Name += suffix
			if _, err := h.kube.RbacV1().ClusterRoles().Create(ctx, r, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = h.kube.RbacV1().ClusterRoles().Delete(ctx, r.Name, metav1.DeleteOptions{}) })
		case *rbacv1.ClusterRoleBinding:
			r.Name += suffix
			r.RoleRef.Name += suffix
			if _, err := h.kube.RbacV1().ClusterRoleBindings().Create(ctx, r, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = h.kube.RbacV1().ClusterRoleBindings().Delete(ctx, r.Name, metav1.DeleteOptions{}) })
		case *rbacv1.Role:
			if _, err := h.kube.RbacV1().Roles(h.ns).Create(ctx, r, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		case *rbacv1.RoleBinding:
			if _, err := h.kube.RbacV1().RoleBindings(h.ns).Create(ctx, r, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		case *admissionv1.ValidatingAdmissionPolicy:
			r.Name += suffix
			if _, err := h.kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, r, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = h.kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, r.Name, metav1.DeleteOptions{})
			})
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			r.Name += suffix
			r.Spec.PolicyName += suffix
			if _, err := h.kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, r, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = h.kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, r.Name, metav1.DeleteOptions{})
			})
		}
	}
}
