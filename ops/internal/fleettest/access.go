package fleettest

import (
	"context"
	"fmt"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/testenv"
)

// The fleet run under the manifest's RBAC and admission policies.

// AsServiceAccount makes the fleet's agents run as the manifest's
// ServiceAccount, each with the bound token of a pod on its own node
// (testenv.PodToken), and its controller as the controller's, under the manifest's RBAC and admission policies
// rendered with mo for the fleet's namespace: a call the shipped manifest
// does not allow fails the test's rollout as it would a real one's.
func (f *Fleet) AsServiceAccount(mo manifest.Options) {
	t := f.T
	t.Helper()
	mo.Namespace = f.NS
	if mo.Image == "" {
		mo.Image = "slipway:test"
	}
	ctx := context.Background()
	for _, obj := range manifest.AccessObjects(mo) {
		if err := f.create(ctx, obj); err != nil {
			t.Fatalf("create %T: %v", obj, err)
		}
	}
	nodes, err := f.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "fleet=" + f.NS})
	if err != nil {
		t.Fatal(err)
	}
	f.Configs = map[string]*rest.Config{}
	for _, n := range nodes.Items {
		yes := true // the DaemonSet's pod, as the drain sees it (and leaves alone)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-" + n.Name, Namespace: f.NS, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "DaemonSet", Name: manifest.AgentName, UID: "0d1e7c5e-0000-4000-8000-0000000000da", Controller: &yes}}},
			Spec: corev1.PodSpec{ServiceAccountName: manifest.AgentName, NodeName: n.Name, Containers: []corev1.Container{{Name: "agent", Image: mo.Image}}}}
		if _, err := f.Kube.CoreV1().Pods(f.NS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cfg, err := testenv.PodToken(ctx, f.config, f.NS, pod.Name)
		if err != nil {
			t.Fatal(err)
		}
		f.Configs[n.Name] = cfg
	}
	if len(nodes.Items) > 0 {
		policiesInForce(t, f.Configs[nodes.Items[0].Name], mo, nodes.Items[0].Name)
	}
	// The controller's pod, on no fleet node (a drain would evict it).
	ctrl := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: manifest.ControllerName, Namespace: f.NS},
		Spec: corev1.PodSpec{ServiceAccountName: manifest.ControllerName, Containers: []corev1.Container{{Name: "controller", Image: mo.Image}}}}
	if _, err := f.Kube.CoreV1().Pods(f.NS).Create(ctx, ctrl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := testenv.PodToken(ctx, f.config, f.NS, ctrl.Name)
	if err != nil {
		t.Fatal(err)
	}
	f.ControllerAs(cfg)
}

// create creates one of the manifest's access objects (the namespace exists);
// cluster-scoped ones are removed at the test's end.
func (f *Fleet) create(ctx context.Context, obj any) error {
	c, o := f.Kube, metav1.CreateOptions{}
	var err error
	var cleanup func() error
	bg := context.Background()
	switch v := obj.(type) {
	case *corev1.Namespace:
		return nil
	case *corev1.ServiceAccount:
		_, err = c.CoreV1().ServiceAccounts(v.Namespace).Create(ctx, v, o)
	case *rbacv1.Role:
		_, err = c.RbacV1().Roles(v.Namespace).Create(ctx, v, o)
	case *rbacv1.RoleBinding:
		_, err = c.RbacV1().RoleBindings(v.Namespace).Create(ctx, v, o)
	case *rbacv1.ClusterRole:
		_, err = c.RbacV1().ClusterRoles().Create(ctx, v, o)
		cleanup = func() error { return c.RbacV1().ClusterRoles().Delete(bg, v.Name, metav1.DeleteOptions{}) }
	case *rbacv1.ClusterRoleBinding:
		_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, v, o)
		cleanup = func() error { return c.RbacV1().ClusterRoleBindings().Delete(bg, v.Name, metav1.DeleteOptions{}) }
	case *admissionv1.ValidatingAdmissionPolicy:
		_, err = c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, v, o)
		cleanup = func() error {
			return c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(bg, v.Name, metav1.DeleteOptions{})
		}
	case *admissionv1.ValidatingAdmissionPolicyBinding:
		_, err = c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, v, o)
		cleanup = func() error {
			return c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(bg, v.Name, metav1.DeleteOptions{})
		}
	default:
		return fmt.Errorf("no client for %T", obj)
	}
	if err == nil && cleanup != nil {
		f.T.Cleanup(func() { _ = cleanup() })
	}
	return err
}

// policiesInForce waits until the API server enforces the admission
// policies just created: it loads them a moment after their creation
// (longer on a loaded machine), each policy on its own, and a call
// admitted before that would pass for one the shipped manifest allows.
// It probes, as the agent and in dry run, a call of a shape each of the
// agent's work policies refuses: the Job policy, and under the policy
// isolation (mo.SlotPods) the slot Pod policy and the slot Pod delete
// policy, the last created (a Job probe alone let a slot Pod of a refused
// shape run on a loaded machine).
func policiesInForce(t *testing.T, agent *rest.Config, mo manifest.Options, node string) {
	t.Helper()
	probes := policyProbes(kubernetes.NewForConfigOrDie(agent), mo, node)
	deadline := time.Now().Add(time.Minute)
	for name, probe := range probes {
		for {
			err := probe(context.Background())
			if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the %s admission policy is not enforced a minute after its creation (probe: %v)", name, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// policyProbes are dry-run calls, one per agent work policy, of a shape
// that policy refuses: a Job and a Pod of another image and no command
// on the node, and the delete of the agent's own pod (a DaemonSet's, not
// a slot Pod).
func policyProbes(cs kubernetes.Interface, mo manifest.Options, node string) map[string]func(context.Context) error {
	ns := mo.Namespace
	spec := corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{Name: "probe", Image: "registry.invalid/not-slipway"}}}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	probes := map[string]func(context.Context) error{
		"Job": func(ctx context.Context) error {
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "policy-probe", Namespace: ns},
				Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: spec}}}
			_, err := cs.BatchV1().Jobs(ns).Create(ctx, job, dry)
			return err
		},
	}
	if mo.SlotPods() {
		probes["slot Pod"] = func(ctx context.Context) error {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "policy-probe", Namespace: ns}, Spec: spec}
			_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, dry)
			return err
		}
		probes["slot Pod delete"] = func(ctx context.Context) error {
			return cs.CoreV1().Pods(ns).Delete(ctx, "agent-"+node, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		}
	}
	return probes
}
