package controller

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/e2e/benchside"
	"slipway.dev/slipway/ops/generated/swarm/clientset/versioned"
	"slipway.dev/slipway/ops/swarm/member"
	"slipway.dev/slipway/ops/testenv"
)

// largeSettings are the benchmark's sizes (SLIPWAY_SWARM_BENCH_WORKERS,
// _JOBS, _REAL_EVERY, _CHANGE).
type largeSettings struct {
	workers, jobs, realEvery, change int
}

func largeSettingsFromEnv() largeSettings {
	s := largeSettings{workers: 1000, jobs: 100_000, realEvery: 50, change: 50}
	for name, v := range map[string]*int{"WORKERS": &s.workers, "JOBS": &s.jobs, "REAL_EVERY": &s.realEvery, "CHANGE": &s.change} {
		if n, err := strconv.Atoi(os.Getenv("SLIPWAY_SWARM_BENCH_" + name)); err == nil && n > 0 {
			*v = n
		}
	}
	return s
}

// BenchmarkLargeSwarm runs the size end to end on the simulated
// cluster: a StatefulSet of 1,000 worker pods (kwok runs them), 100,000 jobs
// (jobsFrom a ConfigMap), reload mode, the controller as a separate
// `slipway swarm controller` process with the manifest's RBAC. Every 50th
// pod runs a real `slipway swarm worker` process (its own Lease, its share
// annotation mounted as the downwardAPI volume would be); the others are
// played in-process the same way (each reads its share after a volume lag
// of its own, runs its jobs, reports the version it applied). Phases: the
// first assignment, then a rebalance with 50 workers removed and one with
// 50 added. For each: the wall until the controller says Converged and
// until what the workers themselves run is every job exactly once; the bytes
// the API server sent on watches (its apiserver_watch_events_sizes); the
// controller's CPU seconds and its memory (anonymous and PSS, from
// smaps_rollup). No job may run on two workers at any sample.
func BenchmarkLargeSwarm(b *testing.B) {
	s := largeSettingsFromEnv()
	lb := newLargeBench(b, s)
	b.Logf("settings: %d workers (%d real worker processes, every %dth pod), %d jobs, reload, rebalance by %d; controller client 50 QPS / burst 100; load %s",
		s.workers, (s.workers+s.realEvery-1)/s.realEvery, s.realEvery, s.jobs, s.change, benchside.LoadAverage())
	lb.phase("first assignment", s.workers, func() {
		lb.p.createSwarm(swarmv1.SwarmSpec{JobsFrom: &swarmv1.JobsSource{ConfigMap: "jobs", Key: "jobs"}, Refresh: swarmv1.RefreshReload})
	})
	lb.phase(fmt.Sprintf("%d workers removed", s.change), s.workers-s.change, func() { lb.p.scale(int32(s.workers - s.change)) })
	lb.phase(fmt.Sprintf("%d workers added", s.change), s.workers, func() { lb.p.scale(int32(s.workers)) })
	lb.ctrl.stop()
	b.Logf("controller in all: %.1f CPU s, peak anon %.1f MiB, peak PSS %.1f MiB; samples with a job on two workers: %d",
		lb.ctrl.cpu().Seconds(), mib(lb.ctrl.peak.PSSAnon), mib(lb.ctrl.peak.PSS), lb.doubles)
	if lb.doubles > 0 {
		b.Errorf("%d samples saw a job run on two workers", lb.doubles)
	}
}

// largeBench is one run of BenchmarkLargeSwarm.
type largeBench struct {
	b       *testing.B
	s       largeSettings
	p       *pool
	store   cache.Store
	sims    *sims
	fleet   *fleet
	ctrl    *ctrlProc
	doubles int
}

func newLargeBench(b *testing.B, s largeSettings) *largeBench {
	e := testenv.Need(b, env)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	fast := rest.CopyConfig(e.Config)
	fast.QPS, fast.Burst = 500, 1000
	p := &pool{t: b, reload: true, applied: map[types.UID]int64{}, ns: fmt.Sprintf("swarm-bench-%d", time.Now().UnixNano()%1e9)}
	p.kube, p.swarm = kubernetes.NewForConfigOrDie(fast), versioned.NewForConfigOrDie(fast)
	lb := &largeBench{b: b, s: s, p: p}
	lb.addNodes(ctx)
	if _, err := p.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	p.applyRBAC(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(p.kube, 0, informers.WithNamespace(p.ns))
	inf := factory.Core().V1().Pods().Informer()
	factory.Start(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
	lb.store = inf.GetStore()
	isReal := func(pod string) bool { return ordinal(pod)%s.realEvery == 0 }
	lb.sims = startSims(ctx, b, p, fast, lb.store, isReal)
	lb.fleet = startFleet(&fleet{t: b, p: p, only: isReal, pods: lb.pods, lease: member.DefaultDuration})

	// The names of BenchmarkLargePool: 1.4 MB of list, over a ConfigMap's
	// 1 MiB, so gzipped into binaryData.
	var jobs strings.Builder
	for i := range s.jobs {
		fmt.Fprintf(&jobs, "stream-%06d\n", i)
	}
	gz, err := gzipBytes([]byte(jobs.String()))
	if err != nil {
		b.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "jobs"}, BinaryData: map[string][]byte{"jobs": gz}}
	if _, err := p.kube.CoreV1().ConfigMaps(p.ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		b.Fatalf("the job list (%d bytes gzipped): %v", len(gz), err)
	}
	b.Logf("job list: %d bytes, %d gzipped in the jobsFrom ConfigMap", jobs.Len(), len(gz))
	start := time.Now()
	lb.statefulSet(ctx)
	lb.waitFor("every worker pod Ready", 15*time.Minute, func() bool { return lb.readyPods() == s.workers })
	b.Logf("%d worker pods Ready in %s (the StatefulSet controller, scheduler and kwok; before the controller starts)", s.workers, time.Since(start).Round(time.Second))
	lb.ctrl = startCtrlProc(b, e, p.ns)
	return lb
}

// addNodes adds kwok nodes with room for the pool (300 pods each).
func (lb *largeBench) addNodes(ctx context.Context) {
	var names []string
	for i := range (lb.s.workers + 299) / 300 {
		n := testenv.FakeNode(fmt.Sprintf("swarm-bench-%d", i))
		n.Status.Capacity[corev1.ResourcePods] = resource.MustParse("300")
		n.Status.Allocatable[corev1.ResourcePods] = resource.MustParse("300")
		if _, err := lb.p.kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			lb.b.Fatal(err)
		}
		names = append(names, n.Name)
	}
	lb.waitFor("the bench nodes Ready", 3*time.Minute, func() bool {
		for _, name := range names {
			n, err := lb.p.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil || !testenv.NodeReady(n) {
				return false
			}
		}
		return true
	})
}

// statefulSet creates the workers' StatefulSet, pods started in parallel.
func (lb *largeBench) statefulSet(ctx context.Context) {
	tmpl := workerTemplate()
	replicas := int32(lb.s.workers)
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "swarm-worker", Labels: map[string]string{"swarm": "work"}},
		Spec: appsv1.StatefulSetSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels},
			Template: tmpl, PodManagementPolicy: appsv1.ParallelPodManagement},
	}
	if _, err := lb.p.kube.AppsV1().StatefulSets(lb.p.ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		lb.b.Fatal(err)
	}
}

// pods is the pool's pods from the informer.
func (lb *largeBench) pods() []*corev1.Pod {
	var out []*corev1.Pod
	for _, o := range lb.store.List() {
		out = append(out, o.(*corev1.Pod))
	}
	return out
}

func (lb *largeBench) readyPods() int {
	n := 0
	for _, pod := range lb.pods() {
		if pod.DeletionTimestamp == nil && podReady(pod) {
			n++
		}
	}
	return n
}

// phase runs act and measures until n workers converged, in the status and
// in what they run.
func (lb *largeBench) phase(name string, n int, act func()) {
	ctx := context.Background()
	watch0, err := benchside.ScrapeWatch(ctx, lb.p.kube)
	if err != nil {
		lb.b.Fatal(err)
	}
	cpu0 := lb.ctrl.cpu()
	lb.ctrl.resetPhase()
	start := time.Now()
	act()
	var status, runs time.Duration
	maxNowhere, samples := 0, 0
	lb.waitFor(name+": converged", 20*time.Minute, func() bool {
		r := lb.runs()
		samples++
		lb.doubles += len(r.doubles)
		if len(r.doubles) > 0 {
			lb.b.Logf("%s: jobs on two workers: %v", name, r.doubles[:min(5, len(r.doubles))])
		}
		maxNowhere = max(maxNowhere, lb.s.jobs-r.distinct)
		if status == 0 && lb.statusConverged(n) {
			status = time.Since(start)
		}
		if runs == 0 && r.distinct == lb.s.jobs && r.workers == n && len(r.doubles) == 0 {
			runs = time.Since(start)
		}
		return status > 0 && runs > 0
	})
	watch1, err := benchside.ScrapeWatch(ctx, lb.p.kube)
	if err != nil {
		lb.b.Fatal(err)
	}
	sent := watch1.Since(watch0)
	for k, v := range sent {
		if v.Bytes < 10<<10 {
			delete(sent, k) // the cluster's own small traffic: counted in no line
		}
	}
	peak := lb.ctrl.phasePeak()
	lb.b.Logf("%s (%d workers): converged (status) in %s, every job running exactly once (workers' reports) in %s; most jobs running nowhere at a sample %d (%d samples); controller %.1f CPU s, peak anon %.1f MiB, PSS %.1f MiB; watch bytes sent %.1f MiB in %.0f events: %s",
		name, n, status.Round(100*time.Millisecond), runs.Round(100*time.Millisecond), maxNowhere, samples,
		(lb.ctrl.cpu() - cpu0).Seconds(), mib(peak.PSSAnon), mib(peak.PSS), sent.Total().Bytes/(1<<20), sent.Total().Events, sent)
	lb.b.ReportMetric(runs.Seconds(), strings.ReplaceAll(name, " ", "-")+"-s")
}

// statusConverged tells whether the Swarm says n workers, Converged, for its
// current generation.
func (lb *largeBench) statusConverged(n int) bool {
	sw, err := lb.p.swarm.SwarmV1alpha1().Swarms(lb.p.ns).Get(context.Background(), "work", metav1.GetOptions{})
	return err == nil && sw.Status.ObservedGeneration == sw.Generation && int(sw.Status.WorkerCount) == n &&
		meta.IsStatusConditionTrue(sw.Status.Conditions, swarmv1.ConditionConverged) &&
		!meta.IsStatusConditionTrue(sw.Status.Conditions, swarmv1.ConditionInvalid)
}

// sample is what the workers run at one instant, by their own account.
type sample struct {
	distinct, workers int
	doubles           []string
}

// runs reads what every worker runs: the played workers' state and the
// real processes' jobs files.
func (lb *largeBench) runs() sample {
	all := lb.sims.runs()
	for w, jobs := range lb.fleet.runs() {
		all[w] = jobs
	}
	owner := make(map[string]string, lb.s.jobs)
	var s sample
	for w, jobs := range all {
		if len(jobs) > 0 {
			s.workers++
		}
		for _, j := range jobs {
			if o, ok := owner[j]; ok {
				s.doubles = append(s.doubles, fmt.Sprintf("%s on %s and %s", j, o, w))
				continue
			}
			owner[j] = w
		}
	}
	s.distinct = len(owner)
	return s
}

// waitFor polls cond every half second until it holds, or fails after limit.
func (lb *largeBench) waitFor(what string, limit time.Duration, cond func() bool) {
	lb.b.Helper()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if cond() {
			return
		}
	}
	lb.b.Fatalf("timed out after %s waiting for %s", limit, what)
}

func ordinal(pod string) int {
	n, _ := strconv.Atoi(pod[strings.LastIndexByte(pod, '-')+1:])
	return n
}

func mib(kb int) float64 { return float64(kb) / 1024 }
