package controller

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/generated/swarm/clientset/versioned"
	"slipway.dev/slipway/ops/swarm/appcheck"
	"slipway.dev/slipway/ops/testenv"
)

// TestHelmUpgradeMidHandover upgrades the swarm chart with `helm upgrade`
// while jobs are handed over: the chart is installed (its ServiceAccounts,
// RBAC and the workers' admission policy), its controller runs as the
// release's Deployment says (its arguments, as its ServiceAccount), real
// `slipway swarm worker` processes with application stand-ins beside them
// (acknowledged handover, 1 s to stop a job) hold 24 jobs on 3 workers; the
// StatefulSet is scaled to 5, and while the jobs move the chart is
// upgraded with a new image tag and a changed value, the old controller
// gets SIGTERM and the new one starts from the upgraded Deployment, as its
// rollout replaces the pod. What the applications run is sampled every
// 0.2 s: no job is ever in two applications' hands, and every job runs
// again, once, on the 5 workers; then a scale down to 3 under the new
// controller, with the same checks.
func TestHelmUpgradeMidHandover(t *testing.T) {
	e := testenv.Need(t, env)
	kube := kubernetes.NewForConfigOrDie(e.Config)
	p := &pool{t: t, reload: true, applied: map[types.UID]int64{}, kube: kube, swarm: versioned.NewForConfigOrDie(e.Config),
		ns: fmt.Sprintf("swarm-helm-%d", time.Now().UnixNano()%1e9)}
	const release = "swarm-upgrade"
	chart := filepath.Join("..", "..", "..", "charts", "slipway-swarm")
	kubecfg := []string{"--kubeconfig", e.Kubeconfig, "--namespace", p.ns}
	helmRun(t, append([]string{"install", release, chart, "--create-namespace", "--set", "image.tag=v1", "--set", "controller.replicas=1"}, kubecfg...)...)
	t.Cleanup(func() {
		helmRun(t, append([]string{"uninstall", release, "--wait"}, kubecfg...)...)
		_ = kube.CoreV1().Namespaces().Delete(context.Background(), p.ns, metav1.DeleteOptions{})
	})
	old := startDeployed(t, e, kube, p.ns, "slipway-swarm-controller", "slipway-swarm-controller-v1")

	f := startFleet(&fleet{t: t, p: p, app: &appMode{stop: time.Second, ack: true}})
	jobs := jobNames(0, 24)
	p.statefulSetOf(3, workerTemplate())
	p.createSwarm(swarmv1.SwarmSpec{Jobs: jobs, Refresh: swarmv1.RefreshReload})
	s := newSampler(f, jobs)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); s.run(ctx) }()
	defer func() { cancel(); wg.Wait(); s.report(t) }()
	f.runsAll(p, 3, jobs)

	s.setJobs("scale 3 -> 5, helm upgrade", jobs)
	p.scale(5)
	// Mid-handover: the new workers counted, the Swarm not converged
	// (jobs revoked from the old workers, waiting for their
	// acknowledgements before they go to the new ones).
	p.waitFor("a handover under way", func(sw *swarmv1.Swarm) bool {
		return sw.Status.WorkerCount == 5 && sw.Status.ObservedGeneration == sw.Generation &&
			!meta.IsStatusConditionTrue(sw.Status.Conditions, swarmv1.ConditionConverged)
	})
	t.Logf("helm upgrade mid-handover: %d of %d jobs running", len(appcheckRunning(f)), len(jobs))
	helmRun(t, append([]string{"upgrade", release, chart, "--set", "image.tag=v2", "--set", "controller.replicas=1",
		"--set", "controller.podAnnotations.example\\.com/upgraded=yes"}, kubecfg...)...)
	dep, err := kube.AppsV1().Deployments(p.ns).Get(context.Background(), "slipway-swarm-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img := dep.Spec.Template.Spec.Containers[0].Image; !strings.HasSuffix(img, ":v2") {
		t.Errorf("after helm upgrade the controller's image is %s", img)
	}
	if dep.Spec.Template.Annotations["example.com/upgraded"] != "yes" {
		t.Errorf("after helm upgrade the controller's pod annotations are %v", dep.Spec.Template.Annotations)
	}
	if sw, err := p.swarm.SwarmV1alpha1().Swarms(p.ns).Get(context.Background(), "work", metav1.GetOptions{}); err == nil &&
		meta.IsStatusConditionTrue(sw.Status.Conditions, swarmv1.ConditionConverged) {
		t.Logf("the handover ended before the controller was replaced")
	}
	old.stop()
	startDeployed(t, e, kube, p.ns, "slipway-swarm-controller", "slipway-swarm-controller-v2")
	f.runsAll(p, 5, jobs)
	t.Logf("every job held again on 5 workers under the upgraded controller")

	s.setJobs("scale 5 -> 3 under the upgraded controller", jobs)
	p.scale(3)
	f.runsAll(p, 3, jobs)
}

// appcheckRunning is every job the applications run now, once per
// application running it.
func appcheckRunning(f *fleet) []string { return appcheck.Running(f.runs()) }

// deployed is a Deployment's first container run as the kubelet would run
// its pod: the arguments the API server holds (what helm applied, $(VAR)
// references expanded from the pod's environment), as the pod's
// ServiceAccount (an impersonating kubeconfig).
type deployed struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

func (d *deployed) Write(b []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out.Write(b)
}

// startDeployed starts Deployment ns/name's container as pod, its HTTP
// port on a free loopback port (the pod's would collide on this host).
func startDeployed(t *testing.T, e *testenv.Env, kube kubernetes.Interface, ns, name, pod string) *deployed {
	t.Helper()
	dep, err := kube.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := dep.Spec.Template.Spec
	cfg, err := testenv.KubeconfigAs(e.Kubeconfig, testenv.ServiceAccount(ns, spec.ServiceAccountName), "")
	if err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kc); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, v := range spec.Containers[0].Env {
		switch {
		case v.ValueFrom == nil:
			vars[v.Name] = v.Value
		case v.ValueFrom.FieldRef != nil && v.ValueFrom.FieldRef.FieldPath == "metadata.name":
			vars[v.Name] = pod
		case v.ValueFrom.FieldRef != nil && v.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			vars[v.Name] = ns
		}
	}
	env := append(os.Environ(), "KUBECONFIG="+kc)
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	var args []string
	for _, a := range spec.Containers[0].Args {
		if strings.HasPrefix(a, "--http=") {
			a = "--http=127.0.0.1:0"
		}
		for k, v := range vars {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		args = append(args, a)
	}
	d := &deployed{done: make(chan struct{})}
	d.cmd = exec.Command(slipwayBinary(t), args...)
	d.cmd.Env = env
	d.cmd.Stdout, d.cmd.Stderr = d, d
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := d.cmd.Wait()
		fmt.Fprintf(d, "exit: %v\n", err)
		close(d.done)
	}()
	t.Cleanup(func() {
		d.stop()
		if t.Failed() {
			d.mu.Lock()
			t.Logf("%s (%v):\n%s", pod, d.cmd.Args, d.out.String())
			d.mu.Unlock()
		}
	})
	return d
}

// stop ends the process as the kubelet ends a replaced pod: SIGTERM, then
// SIGKILL after the grace period.
func (d *deployed) stop() {
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// helmRun runs the pinned helm that scripts/install-tools links into the
// tools directory (a missing helm fails the test).
func helmRun(t *testing.T, args ...string) []byte {
	t.Helper()
	dir := os.Getenv(testenv.EnvToolsDir)
	if dir == "" {
		out, err := exec.Command("../../../scripts/install-tools").Output()
		if err != nil {
			t.Fatalf("scripts/install-tools: %v", err)
		}
		fields := strings.Fields(string(out))
		dir = fields[len(fields)-1]
	}
	cmd := exec.Command(filepath.Join(dir, "helm"), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return out
}
