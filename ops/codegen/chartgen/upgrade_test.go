package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	edsv1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/generated/eds/clientset/versioned"
	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/testenv/chartproc"
)

var (
	slipwayOnce sync.Once
	slipwayPath string
	slipwayErr  error
)

// slipwayBinary builds cmd/slipway once for the package's tests.
func slipwayBinary(t *testing.T) string {
	t.Helper()
	slipwayOnce.Do(func() {
		dir, err := os.MkdirTemp("", "chartgen-slipway-")
		if err != nil {
			slipwayErr = err
			return
		}
		slipwayPath = filepath.Join(dir, "slipway")
		if out, err := exec.Command("go", "build", "-o", slipwayPath, "../../../cmd/slipway").CombinedOutput(); err != nil {
			slipwayErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if slipwayErr != nil {
		t.Fatal(slipwayErr)
	}
	return slipwayPath
}

// startChartController starts the first container of Deployment name as
// the release in ns applied it, as identity pod, its metrics address
// metricsAddr ("" = off: the pod's port would collide on this host).
func startChartController(t *testing.T, e *testenv.Env, ns, name, pod, metricsAddr string) *chartproc.Process {
	t.Helper()
	return chartproc.Start(t, e, kubernetes.NewForConfigOrDie(e.Config), chartproc.Options{
		Bin: slipwayBinary(t), Namespace: ns, Name: name, Pod: pod,
		Edit: func(args []string) []string {
			for i, a := range args {
				switch {
				case strings.HasPrefix(a, "--metrics-addr=") || strings.HasPrefix(a, "--http="):
					args[i] = a[:strings.Index(a, "=")+1] + metricsAddr
				case a == "--metrics-addr" && i+1 < len(args):
					args[i+1] = metricsAddr
				}
			}
			return args
		},
	})
}

// TestHelmUpgradeMidCanary upgrades the EDS chart with `helm upgrade` while
// an ExtendedDaemonSet's canary runs: the release's controller runs as the
// chart renders it (its arguments, its ServiceAccount's RBAC); the upgrade
// changes the image tag and a value, the old controller gets SIGTERM and the
// new one starts, as the Deployment's rollout replaces the pod. The canary
// keeps its ReplicaSet and nodes (no second canary, no rollback), the EDS
// finishes on the new template on every node, and the upgrade leaves no
// ERS of a third template.
func TestHelmUpgradeMidCanary(t *testing.T) {
	e := testenv.Need(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const release, ns, work = "eds-upgrade", "eds-upgrade-system", "eds-upgrade-work"
	kube := []string{"--kubeconfig", e.Kubeconfig}
	cs := kubernetes.NewForConfigOrDie(e.Config)
	eds := versioned.NewForConfigOrDie(e.Config)
	dir := filepath.Join(chartsDir, "slipway-eds")
	helm(t, append([]string{"install", release, dir, "--namespace", ns, "--create-namespace",
		"--set", "image.tag=v1", "--set", "controller.replicas=1"}, kube...)...)
	t.Cleanup(func() {
		cmd := exec.Command(helmBin(t), append([]string{"uninstall", release, "--namespace", ns, "--wait"}, kube...)...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("helm uninstall: %v\n%s", err, out)
		}
		for _, n := range []string{ns, work} {
			_ = cs.CoreV1().Namespaces().Delete(context.Background(), n, metav1.DeleteOptions{})
		}
	})
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: work}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	old := startChartController(t, e, ns, "slipway-eds-controller", "slipway-eds-controller-v1", "")

	one := intstr.FromInt32(1)
	d := &edsv1.ExtendedDaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "daemon", Namespace: work},
		Spec: edsv1.ExtendedDaemonSetSpec{
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "daemon"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "daemon", Image: "daemon:a"}}}},
			Strategy: edsv1.ExtendedDaemonSetSpecStrategy{Canary: &edsv1.ExtendedDaemonSetSpecStrategyCanary{Replicas: &one,
				Duration: &metav1.Duration{Duration: 40 * time.Second}, NoRestartsDuration: &metav1.Duration{Duration: time.Second}}},
		}}
	if _, err := eds.EdsV1alpha1().ExtendedDaemonSets(work).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	get := func() *edsv1.ExtendedDaemonSet {
		got, err := eds.EdsV1alpha1().ExtendedDaemonSets(work).Get(ctx, "daemon", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	waitFor := func(d time.Duration, what string, cond func(*edsv1.ExtendedDaemonSet) bool) *edsv1.ExtendedDaemonSet {
		t.Helper()
		deadline := time.Now().Add(d)
		for {
			got := get()
			if cond(got) {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s within %v: status %+v", what, d, got.Status)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	nodes := int32(len(e.Nodes))
	first := waitFor(3*time.Minute, "first template Running on every node", func(x *edsv1.ExtendedDaemonSet) bool {
		return x.Status.State == edsv1.StateRunning && x.Status.ActiveReplicaSet != "" && x.Status.Ready == nodes && x.Status.UpToDate == nodes
	})
	patch := `[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"daemon:b"}]`
	if _, err := eds.EdsV1alpha1().ExtendedDaemonSets(work).Patch(ctx, "daemon", types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	canary := waitFor(2*time.Minute, "a canary of the new template", func(x *edsv1.ExtendedDaemonSet) bool {
		return x.Status.State == edsv1.StateCanary && x.Status.Canary != nil && len(x.Status.Canary.Nodes) == 1
	}).Status.Canary

	// helm upgrade mid-canary: a new image and a changed value; the
	// Deployment's new pod replaces the old (SIGTERM), here the process.
	helm(t, append([]string{"upgrade", release, dir, "--namespace", ns,
		"--set", "image.tag=v2", "--set", "controller.replicas=1", "--set", "controller.podAnnotations.example\\.com/upgraded=yes"}, kube...)...)
	if st := get().Status; st.State != edsv1.StateCanary || st.Canary == nil || st.Canary.ReplicaSet != canary.ReplicaSet {
		t.Fatalf("helm upgrade changed the canary: %+v", st)
	}
	old.Stop()
	metricsAddr := freeAddr(t)
	startChartController(t, e, ns, "slipway-eds-controller", "slipway-eds-controller-v2", metricsAddr)
	// The Deployment now runs the new image.
	dep, err := cs.AppsV1().Deployments(ns).Get(ctx, "slipway-eds-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img := dep.Spec.Template.Spec.Containers[0].Image; !strings.HasSuffix(img, ":v2") {
		t.Errorf("after helm upgrade the controller's image is %s", img)
	}

	done := waitFor(4*time.Minute, "the new template Running on every node", func(x *edsv1.ExtendedDaemonSet) bool {
		return x.Status.State == edsv1.StateRunning && x.Status.ActiveReplicaSet == canary.ReplicaSet &&
			x.Status.Ready == nodes && x.Status.UpToDate == nodes && x.Status.Canary == nil
	})
	if done.Status.ActiveReplicaSet == first.Status.ActiveReplicaSet {
		t.Errorf("the EDS still runs its first template's ERS %s", first.Status.ActiveReplicaSet)
	}
	// Exactly one ERS per template: the replaced controller made none of
	// its own.
	list, err := eds.EdsV1alpha1().ExtendedDaemonSetReplicaSets(work).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range list.Items {
		names = append(names, r.Name)
	}
	if slices.ContainsFunc(names, func(n string) bool { return n != first.Status.ActiveReplicaSet && n != canary.ReplicaSet }) {
		t.Errorf("ERSes %v: want only %s and %s", names, first.Status.ActiveReplicaSet, canary.ReplicaSet)
	}
	checkScrapedMetrics(t, "slipway-eds", "http://"+metricsAddr+"/metrics")
	pods, err := cs.CoreV1().Pods(work).List(ctx, metav1.ListOptions{LabelSelector: "app=daemon"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Spec.Containers[0].Image != "daemon:b" {
			t.Errorf("pod %s on %s still runs %s", p.Name, p.Spec.NodeName, p.Spec.Containers[0].Image)
		}
	}
}

// freeAddr is a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// checkScrapedMetrics scrapes a running controller's /metrics, runs
// `promtool check metrics` (Prometheus's own lint of names, types, help
// and units) on what it serves, and checks that every slipway metric the
// chart's alerts and dashboard name is one it serves: names gathered from
// the real collector, not from the source.
func checkScrapedMetrics(t *testing.T, chart, url string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %v %s", url, err, resp.Status)
	}
	cmd := exec.Command(filepath.Join(filepath.Dir(helmBin(t)), "promtool"), "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s: promtool check metrics on the controller's /metrics: %v\n%s", chart, err, out)
	}
	served := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) (\S+)$`).FindAllStringSubmatch(string(body), -1) {
		served[m[1]] = true
		if m[2] == "histogram" || m[2] == "summary" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				served[m[1]+s] = true
			}
		}
	}
	var exprs []string
	for _, p := range Dashboards[chart] {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	rules, err := os.ReadFile(filepath.Join(chartsDir, chart, "rules", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	exprs = append(exprs, string(rules))
	for _, x := range exprs {
		for _, name := range metricName.FindAllString(x, -1) {
			if !served[name] {
				t.Errorf("%s: its alerts or dashboard name %s, which the running controller does not serve", chart, name)
			}
		}
	}
}
