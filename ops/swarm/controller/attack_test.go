package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/swarm/manifest"
	"slipway.dev/slipway/ops/swarm/member"
	"slipway.dev/slipway/ops/testenv"
)

// applyAdmission creates the manifest's admission policies (the workers'
// and the controller's) for the pool's namespace, removed with the test.
func (p *pool) applyAdmission(ctx context.Context) {
	p.t.Helper()
	api := p.kube.AdmissionregistrationV1()
	for _, obj := range append(manifest.WorkerAdmission(p.ns), manifest.ControllerAdmission(p.ns)...) {
		var err error
		switch o := obj.(type) {
		case *admissionv1.ValidatingAdmissionPolicy:
			_, err = api.ValidatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{})
			p.t.Cleanup(func() {
				_ = api.ValidatingAdmissionPolicies().Delete(context.Background(), o.Name, metav1.DeleteOptions{})
			})
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			_, err = api.ValidatingAdmissionPolicyBindings().Create(ctx, o, metav1.CreateOptions{})
			p.t.Cleanup(func() {
				_ = api.ValidatingAdmissionPolicyBindings().Delete(context.Background(), o.Name, metav1.DeleteOptions{})
			})
		}
		if err != nil {
			p.t.Fatal(err)
		}
	}
}

// TestWorkerTokenIsConfined attacks with the exact token a worker pod
// mounts (bound to swarm-worker-0, its pod-name claim): the API server lets
// it write its own report (its pod's applied-version annotation, its own
// Lease) and refuses everything else the workers' Role would otherwise
// allow: another pod, its own pod's labels, image, finalizers or
// ownerReferences, the controller's Lease, another worker's Lease, the
// controller's fence on its own Lease.
func TestWorkerTokenIsConfined(t *testing.T) {
	t.Parallel() // a namespace of its own (see TestMain)
	p := newPool(t, true)
	ctx := context.Background()
	p.applyAdmission(ctx)
	tmpl := podTemplate(map[string]string{"app": "worker"})
	tmpl.Spec.ServiceAccountName = manifest.WorkerName
	p.statefulSetOf(2, tmpl)
	p.createSwarm(swarmv1.SwarmSpec{Jobs: jobNames(0, 4), Refresh: swarmv1.RefreshReload})
	p.converged(2)
	cfg, err := testenv.PodToken(ctx, env.Config, p.ns, "swarm-worker-0")
	if err != nil {
		t.Fatal(err)
	}
	kc := kubernetes.NewForConfigOrDie(cfg)
	pods, leases := kc.CoreV1().Pods(p.ns), kc.CoordinationV1().Leases(p.ns)
	patch := func(pod, body string) error {
		_, err := pods.Patch(ctx, pod, types.StrategicMergePatchType, []byte(body), metav1.PatchOptions{})
		return err
	}
	annotate := func(pod string) error {
		return patch(pod, fmt.Sprintf(`{"metadata":{"annotations":{%q:"7"}}}`, swarmv1.AppliedVersionAnnotation))
	}
	lease := func(name string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	// The policy takes a moment to be in force: wait for its first refusal.
	deadline := time.Now().Add(30 * time.Second)
	for annotate("swarm-worker-1") == nil {
		if time.Now().After(deadline) {
			t.Fatal("the worker's token still writes another worker's pod after 30 s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	own, err := leases.Create(ctx, lease(member.LeaseName("swarm-worker-0")), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the worker may not create its own Lease: %v", err)
	}
	if err := annotate("swarm-worker-0"); err != nil {
		t.Errorf("the worker may not report on its own pod: %v", err)
	}
	fenced := own.DeepCopy()
	fenced.Annotations = map[string]string{member.MinVersionAnnotation: "0"}
	for what, err := range map[string]error{
		"annotate another worker's pod": annotate("swarm-worker-1"),
		"label its own pod":             patch("swarm-worker-0", `{"metadata":{"labels":{"app":"other"}}}`),
		"change its own pod's image":    patch("swarm-worker-0", `{"spec":{"containers":[{"name":"worker","image":"evil:latest"}]}}`),
		"annotate its pod otherwise":    patch("swarm-worker-0", `{"metadata":{"annotations":{"x":"y"}}}`),
		"annotate its pod with a key that only begins like its own": patch("swarm-worker-0",
			fmt.Sprintf(`{"metadata":{"annotations":{%q:"7"}}}`, swarmv1.AppliedVersionAnnotation+"-x")),
		"add a finalizer to its pod":  patch("swarm-worker-0", `{"metadata":{"finalizers":["example.com/hold"]}}`),
		"drop its pod's owner":        errOf(pods.Patch(ctx, "swarm-worker-0", types.MergePatchType, []byte(`{"metadata":{"ownerReferences":null}}`), metav1.PatchOptions{})),
		"delete a pod":                pods.Delete(ctx, "swarm-worker-1", metav1.DeleteOptions{}),
		"take the controller's Lease": errOf(leases.Create(ctx, lease(manifest.ControllerName), metav1.CreateOptions{})),
		"take another worker's Lease": errOf(leases.Create(ctx, lease(member.LeaseName("swarm-worker-1")), metav1.CreateOptions{})),
		"lift its own fence":          errOf(leases.Update(ctx, fenced, metav1.UpdateOptions{})),
	} {
		switch {
		case apierrors.IsForbidden(err) && !strings.Contains(err.Error(), "ValidatingAdmissionPolicy"):
			t.Logf("%s: refused by RBAC", what)
		case (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) && strings.Contains(err.Error(), "swarm worker"):
			t.Logf("%s: refused by the admission policy", what)
		default:
			t.Errorf("%s: %v, want refused by RBAC or the workers' admission policy", what, err)
		}
	}
}

func errOf[T any](_ T, err error) error { return err }
