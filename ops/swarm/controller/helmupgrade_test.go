package controller

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/generated/swarm/clientset/versioned"
	"slipway.dev/slipway/ops/swarm/appcheck"
	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/testenv/chartproc"
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
	t.Parallel() // a namespace of its own (see TestMain)
	e := testenv.Need(t, env)
	kube := kubernetes.NewForConfigOrDie(e.Config)
	p := &pool{t: t, reload: true, applied: map[types.UID]int64{}, kube: kube, swarm: versioned.NewForConfigOrDie(e.Config),
		ns: fmt.Sprintf("swarm-helm-%d-%d", time.Now().UnixNano()%1e9, poolSeq.Add(1))}
	const release = "swarm-upgrade"
	chart := filepath.Join("..", "..", "..", "charts", "slipway-swarm")
	kubecfg := []string{"--kubeconfig", e.Kubeconfig, "--namespace", p.ns}
	chartproc.Helm(t, append([]string{"install", release, chart, "--create-namespace", "--set", "image.tag=v1", "--set", "controller.replicas=1"}, kubecfg...)...)
	t.Cleanup(func() {
		chartproc.Helm(t, append([]string{"uninstall", release, "--wait"}, kubecfg...)...)
		_ = kube.CoreV1().Namespaces().Delete(context.Background(), p.ns, metav1.DeleteOptions{})
	})
	old := startReleaseController(t, e, kube, p.ns, "slipway-swarm-controller-v1")

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
	chartproc.Helm(t, append([]string{"upgrade", release, chart, "--set", "image.tag=v2", "--set", "controller.replicas=1",
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
	old.Stop()
	startReleaseController(t, e, kube, p.ns, "slipway-swarm-controller-v2")
	f.runsAll(p, 5, jobs)
	t.Logf("every job held again on 5 workers under the upgraded controller")

	s.setJobs("scale 5 -> 3 under the upgraded controller", jobs)
	p.scale(3)
	f.runsAll(p, 3, jobs)
}

// appcheckRunning is every job the applications run now, once per
// application running it.
func appcheckRunning(f *fleet) []string { return appcheck.Running(f.runs()) }

// startReleaseController runs the release's controller Deployment as pod, its
// HTTP port on a free loopback port (the pod's would collide on this host).
func startReleaseController(t *testing.T, e *testenv.Env, kube kubernetes.Interface, ns, pod string) *chartproc.Process {
	t.Helper()
	return chartproc.Start(t, e, kube, chartproc.Options{
		Bin: slipwayBinary(t), Namespace: ns, Name: "slipway-swarm-controller", Pod: pod,
		Edit: func(args []string) []string {
			for i, a := range args {
				if strings.HasPrefix(a, "--http=") {
					args[i] = "--http=127.0.0.1:0"
				}
			}
			return args
		},
	})
}
