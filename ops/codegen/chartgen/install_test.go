package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"

	"slipway.dev/slipway/ops/testenv"
	uo "slipway.dev/slipway/ops/updateoperator"
)

// TestHelmInstallRunsAndUninstallLeavesNothing installs every chart with
// its default values and the monitoring objects on (validated by the API
// server against the Prometheus operator's CRDs) into the simulated
// cluster, checks that what it installed runs (every DaemonSet pod and
// Deployment replica scheduled and Ready, every object there), then
// uninstalls each and checks that no object of the chart is left (CRDs
// aside: Helm keeps crds/).
func TestHelmInstallRunsAndUninstallLeavesNothing(t *testing.T) {
	e := testenv.Need(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cs := kubernetes.NewForConfigOrDie(e.Config)
	// The update operator's agents run only on nodes that speak its protocol.
	label := fmt.Sprintf(`{"metadata":{"labels":{%q:"2.0.0"}}}`, uo.DefaultPrefix+"/updater-interface-version")
	if _, err := cs.CoreV1().Nodes().Patch(ctx, e.Nodes[0], "application/merge-patch+json", []byte(label), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	kube := []string{"--kubeconfig", e.Kubeconfig}
	monitoring := []string{"--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.dashboard.enabled=true"}
	dyn := dynamic.NewForConfigOrDie(e.Config)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery.NewDiscoveryClientForConfigOrDie(e.Config)))
	get := func(ctx context.Context, o Object) error {
		u := unstructured.Unstructured{Object: o}
		m, err := mapper.RESTMapping(u.GroupVersionKind().GroupKind(), u.GroupVersionKind().Version)
		if err != nil {
			return err
		}
		_, err = dyn.Resource(m.Resource).Namespace(u.GetNamespace()).Get(ctx, u.GetName(), metav1.GetOptions{})
		return err
	}
	for _, c := range Charts() {
		dir := filepath.Join(chartsDir, c.Name)
		helm(t, append(append([]string{"install", c.Name, dir, "--namespace", c.DefaultNamespace, "--create-namespace",
			"--wait", "--timeout", "3m"}, monitoring...), kube...)...)
		objs, err := ParseDocs(helm(t, append([]string{"template", c.Name, dir, "--namespace", c.DefaultNamespace}, monitoring...)...))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if err := get(ctx, o); err != nil {
				t.Errorf("%s: %s not installed: %v", c.Name, Key(o), err)
			}
			checkRuns(ctx, t, cs, o)
		}
	}
	for _, c := range Charts() {
		dir := filepath.Join(chartsDir, c.Name)
		objs, err := ParseDocs(helm(t, append([]string{"template", c.Name, dir, "--namespace", c.DefaultNamespace}, monitoring...)...))
		if err != nil {
			t.Fatal(err)
		}
		helm(t, append([]string{"uninstall", c.Name, "--namespace", c.DefaultNamespace, "--wait", "--timeout", "3m"}, kube...)...)
		for _, o := range objs {
			gone := func(ctx context.Context) (bool, error) { return apierrors.IsNotFound(get(ctx, o)), nil }
			if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, gone); err != nil {
				t.Errorf("%s: %s is still there after helm uninstall", c.Name, Key(o))
			}
		}
	}
}

// checkRuns waits until a workload of the chart runs: a DaemonSet with
// every scheduled pod Ready (at least one), a Deployment with every replica
// available; other objects only have to exist.
func checkRuns(ctx context.Context, t *testing.T, cs kubernetes.Interface, o Object) {
	t.Helper()
	u := unstructured.Unstructured{Object: o}
	ns, name := u.GetNamespace(), u.GetName()
	var ready wait.ConditionWithContextFunc
	switch u.GetKind() {
	case "DaemonSet":
		ready = func(ctx context.Context) (bool, error) {
			ds, err := cs.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
			return err == nil && ds.Status.DesiredNumberScheduled > 0 && ds.Status.NumberReady == ds.Status.DesiredNumberScheduled, nil
		}
	case "Deployment":
		ready = func(ctx context.Context) (bool, error) {
			d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
			return err == nil && deploymentAvailable(d), nil
		}
	default:
		return
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, ready); err != nil {
		t.Errorf("%s %s/%s installed by its chart does not run: %v", u.GetKind(), ns, name, err)
	}
}

func deploymentAvailable(d *appsv1.Deployment) bool {
	return d.Spec.Replicas != nil && *d.Spec.Replicas > 0 && d.Status.AvailableReplicas == *d.Spec.Replicas
}

// TestAgentChartInABaselineNamespace installs the agent chart with the real
// helm into a namespace whose Pod Security level is `baseline` (what a
// cluster defaulting to baseline gives a namespace `helm install
// --create-namespace` makes): the API server refuses the agent pods
// (hostPID, host paths, SYS_BOOT) and the DaemonSet gets none, which is why
// docs/install.md has the namespace labelled `privileged` first. Then it
// runs that documented step (`kubectl label namespace ...
// pod-security.kubernetes.io/enforce=privileged --overwrite`) and installs
// again: every agent pod is admitted and Ready.
func TestAgentChartInABaselineNamespace(t *testing.T) {
	e := testenv.Need(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cs := kubernetes.NewForConfigOrDie(e.Config)
	const ns, release = "psa-baseline", "slipway-agent"
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	kube := []string{"--kubeconfig", e.Kubeconfig}
	dir := filepath.Join(chartsDir, "slipway-agent")
	objs, err := ParseDocs(helm(t, "template", release, dir, "--namespace", ns))
	if err != nil {
		t.Fatal(err)
	}
	var ds string
	for _, o := range objs {
		if u := (unstructured.Unstructured{Object: o}); u.GetKind() == "DaemonSet" {
			ds = u.GetName()
		}
	}
	if ds == "" {
		t.Fatal("the agent chart renders no DaemonSet")
	}

	// Baseline: the DaemonSet controller's pods are refused by Pod Security.
	helm(t, append([]string{"install", release, dir, "--namespace", ns}, kube...)...)
	refused := func(ctx context.Context) (bool, error) {
		evs, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=DaemonSet,involvedObject.name=" + ds})
		if err != nil {
			return false, nil
		}
		for _, ev := range evs.Items {
			if ev.Reason == "FailedCreate" && strings.Contains(ev.Message, `violates PodSecurity "baseline`) {
				return true, nil
			}
		}
		return false, nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, refused); err != nil {
		t.Fatalf("no FailedCreate event for PodSecurity baseline on DaemonSet %s/%s: %v", ns, ds, err)
	}
	// The controller (restricted) is admitted; no agent pod is.
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if ref := metav1.GetControllerOf(&p); ref != nil && ref.Kind == "DaemonSet" {
			t.Errorf("the baseline namespace admitted the agent pod %s", p.Name)
		}
	}
	helm(t, append([]string{"uninstall", release, "--namespace", ns, "--wait", "--timeout", "2m"}, kube...)...)

	// The documented step, with kubectl, then the install of docs/install.md.
	kubectl := filepath.Join(filepath.Dir(helmBin(t)), "kubectl")
	if out, err := exec.Command(kubectl, append([]string{"label", "namespace", ns, "pod-security.kubernetes.io/enforce=privileged", "--overwrite"}, kube...)...).CombinedOutput(); err != nil {
		t.Fatalf("kubectl label: %v\n%s", err, out)
	}
	helm(t, append([]string{"install", release, dir, "--namespace", ns, "--wait", "--timeout", "3m"}, kube...)...)
	for _, o := range objs {
		checkRuns(ctx, t, cs, o)
	}
	helm(t, append([]string{"uninstall", release, "--namespace", ns, "--wait", "--timeout", "2m"}, kube...)...)
}
