package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/swarm/appcheck"
)

// The schedules below are fault schedules run against real worker
// processes and application stand-ins (package appcheck) on the simulated
// cluster. Each samples what the applications themselves report they run
// and fails on any job in two applications' hands at once
// (appcheck.DoubleHeld).

// schedule is one named fault schedule: its steps, each waited for until
// the Swarm converged over n workers and the applications run every job
// once.
type schedule struct {
	refresh string
	app     appMode
	workers int32
	jobs    []string
	steps   []step
	// lease is the workers' Lease duration (default workerLease).
	lease time.Duration
	// deployment runs the workers as a Deployment (default a StatefulSet).
	deployment bool
}

// step is one fault or change; then the schedule waits until the Swarm
// converged over n workers and the applications run every job once (n 0:
// only the applications, the Swarm may not converge with a worker paused).
type step struct {
	name string
	do   func(p *pool, f *fleet)
	n    int
}

// appsRunOnce waits until the applications run every job of jobs exactly
// once, whatever the Swarm's status says.
func (f *fleet) appsRunOnce(jobs []string) {
	f.t.Helper()
	want := slices.Sorted(slices.Values(jobs))
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if slices.Equal(appcheck.Running(f.runs()), want) {
			return
		}
	}
	f.t.Fatalf("timed out waiting for the applications to run every job once; they run %v", f.runs())
}

// run plays s and reports every double and gap.
func (s schedule) run(t *testing.T) {
	p := newPoolWith(t, s.refresh == swarmv1.RefreshReload, false)
	p.applyAdmission(context.Background())
	app := s.app
	f := startFleet(&fleet{t: t, p: p, once: s.refresh == swarmv1.RefreshRestart, app: &app, lease: s.lease})
	if s.deployment {
		p.deploymentOf(s.workers, workerTemplate())
	} else {
		p.statefulSetOf(s.workers, workerTemplate())
	}
	p.createSwarm(swarmv1.SwarmSpec{Jobs: s.jobs, Refresh: s.refresh})
	smp := newSampler(f, s.jobs)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); smp.run(ctx) }()
	defer func() { cancel(); wg.Wait(); smp.report(t) }()
	f.runsAll(p, int(s.workers), s.jobs)
	for _, st := range s.steps {
		smp.setJobs(st.name, s.jobs)
		st.do(p, f)
		if st.n > 0 {
			f.runsAll(p, st.n, s.jobs)
		} else {
			f.appsRunOnce(s.jobs)
		}
		t.Logf("%s: done", st.name)
	}
}

// TestSchedule_SlowApplicationStop: faults: an application that takes 2 s
// to stop a job (it runs the job meanwhile), with
//
//   - an ordinary sidecar (the worker and the application stopped together)
//     and the application acknowledging (--ack), in both refresh modes,
//     through a revocation between live workers (scale 3 -> 4), a rolling
//     update of every pod and a scale down (4 -> 2): the worker confirms a
//     share, and releases its Lease, only once the application
//     acknowledged it stopped what was taken away.
//
// Only reload mode tells the fix apart (without the acknowledgement it
// fails at the revocation); restart mode is run for coverage: its
// revocations are pod restarts, which the settle wait and the pod's own
// lifetime already order.
func TestSchedule_SlowApplicationStop(t *testing.T) {
	t.Parallel() // a namespace of its own (see TestMain)
	withAck := []step{
		{"scale 3 -> 4 (revocation)", func(p *pool, _ *fleet) { p.scale(4) }, 4},
		{"rolling update", func(p *pool, _ *fleet) { p.rollOut() }, 4},
		{"scale 4 -> 2", func(p *pool, _ *fleet) { p.scale(2) }, 2},
	}
	slow := 2 * time.Second
	for _, tc := range []struct {
		name string
		s    schedule
	}{
		{"ack, reload", schedule{refresh: swarmv1.RefreshReload, workers: 3, steps: withAck, app: appMode{stop: slow, ack: true}}},
		{"ack, restart", schedule{refresh: swarmv1.RefreshRestart, workers: 3, steps: withAck, app: appMode{stop: slow, ack: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // a pool of its own
			tc.s.jobs = jobNames(0, 12)
			tc.s.run(t)
		})
	}
}

// TestSchedule_SIGSTOPPastLease: faults: a worker paused (SIGSTOP) past
// its Lease while the pool scales 3 -> 4, then resumed (SIGCONT); a worker
// crash-looping (killed with SIGKILL, restarted after a back-off longer
// than its Lease, twice). The application (1 s to stop a job, a 6 s
// Lease) stops its jobs by itself once the jobs file's swarm-valid-until
// passed unrenewed, before the controller hands them out.
func TestSchedule_SIGSTOPPastLease(t *testing.T) {
	t.Parallel() // a namespace of its own (see TestMain)
	s := schedule{refresh: swarmv1.RefreshReload, workers: 3, jobs: jobNames(0, 12), lease: 6 * time.Second,
		app: appMode{stop: time.Second, ack: true}, steps: []step{
			{"swarm-worker-1 paused (SIGSTOP), scale 3 -> 4", func(p *pool, f *fleet) {
				f.signal("swarm-worker-1", syscall.SIGSTOP)
				p.scale(4)
			}, 0},
			{"swarm-worker-1 paused past its Lease", func(*pool, *fleet) { time.Sleep(8 * time.Second) }, 0},
			{"swarm-worker-1 resumed (SIGCONT)", func(_ *pool, f *fleet) { f.signal("swarm-worker-1", syscall.SIGCONT) }, 4},
			{"swarm-worker-2 crash-looping", func(_ *pool, f *fleet) {
				f.crash("swarm-worker-2", 9*time.Second)
				time.Sleep(time.Second)
				f.crash("swarm-worker-2", 9*time.Second)
			}, 4},
		}}
	s.run(t)
}

// TestSchedule_ForceDeleteWhileRunning: faults: a worker pod force-deleted
// (grace 0) while its worker and application go on running, as on a node
// the API server cannot reach.
//
//   - StatefulSet: the pod is created again under the same name at once.
//     The replacement's worker holds its Lease as its own pod's UID, so it
//     waits until the old incarnation's Lease lapsed (its bound token died
//     with its pod: it can renew no more and stops its jobs) instead of
//     renewing it as its own and running the same share beside it.
//   - Deployment: the replacement has a new name. The gone pod's jobs move
//     only once its Lease is released or lapsed, not when its pod object
//     is gone.
func TestSchedule_ForceDeleteWhileRunning(t *testing.T) {
	t.Parallel() // a namespace of its own (see TestMain)
	t.Run("statefulset", func(t *testing.T) {
		t.Parallel() // a pool of its own
		s := schedule{refresh: swarmv1.RefreshReload, workers: 3, jobs: jobNames(0, 12), lease: 6 * time.Second,
			app: appMode{stop: time.Second, ack: true}, steps: []step{
				{"swarm-worker-1 force-deleted, its processes running", func(_ *pool, f *fleet) { f.forceDelete("swarm-worker-1") }, 0},
				{"the replacement's Lease wait", func(*pool, *fleet) { time.Sleep(10 * time.Second) }, 3},
			}}
		s.run(t)
	})
	t.Run("deployment", func(t *testing.T) {
		t.Parallel() // a pool of its own
		s := schedule{refresh: swarmv1.RefreshReload, workers: 3, jobs: jobNames(0, 12), lease: 6 * time.Second, deployment: true,
			app: appMode{stop: time.Second, ack: true}, steps: []step{
				{"a worker pod force-deleted, its processes running", func(p *pool, f *fleet) {
					var victim string
					for name := range p.podUIDs() {
						victim = name
					}
					f.forceDelete(victim)
				}, 0},
				{"the gone pod's Lease lapses", func(*pool, *fleet) { time.Sleep(10 * time.Second) }, 3},
			}}
		s.run(t)
	})
}

// deploymentOf creates the workers' Deployment, labelled for the Swarm.
func (p *pool) deploymentOf(replicas int32, tmpl corev1.PodTemplateSpec) {
	p.t.Helper()
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "swarm-worker", Namespace: p.ns, Labels: map[string]string{"swarm": "work"}},
		Spec:       appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels}, Template: tmpl},
	}
	if _, err := p.kube.AppsV1().Deployments(p.ns).Create(context.Background(), dep, metav1.CreateOptions{}); err != nil {
		p.t.Fatal(err)
	}
}

// rollOut changes the workers' pod template and waits until the
// StatefulSet replaced every pod.
func (p *pool) rollOut() {
	p.t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"test.slipway.dev/rollout":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
	api := p.kube.AppsV1().StatefulSets(p.ns)
	if _, err := api.Patch(context.Background(), "swarm-worker", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		p.t.Fatal(err)
	}
	p.waitFor("every pod replaced by the rolling update", func(*swarmv1.Swarm) bool {
		sts, err := api.Get(context.Background(), "swarm-worker", metav1.GetOptions{})
		if err != nil || sts.Status.ObservedGeneration != sts.Generation {
			return false
		}
		return sts.Status.UpdateRevision != "" && sts.Status.CurrentRevision == sts.Status.UpdateRevision &&
			sts.Status.UpdatedReplicas == *sts.Spec.Replicas && sts.Status.ReadyReplicas == *sts.Spec.Replicas
	})
}
