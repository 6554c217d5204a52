package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/swarm/appcheck"
)

// sampler reads what each real worker process runs every 0.2 s and records
// every job seen on two workers at once, and every gap: a job that ran and
// then ran nowhere for a while.
type sampler struct {
	f       *fleet
	start   time.Time
	mu      sync.Mutex
	step    string
	jobs    map[string]bool   // the job list in force
	ranOnce map[string]bool   // jobs seen running at least once
	since   map[string]opened // open gaps
	gaps    []gap
	doubles []string
	samples int
}

type opened struct {
	at   time.Time
	step string
}

type gap struct {
	job, step string
	from, d   time.Duration
}

func newSampler(f *fleet, jobs []string) *sampler {
	s := &sampler{f: f, start: time.Now(), ranOnce: map[string]bool{}, since: map[string]opened{}}
	s.setJobs("start", jobs)
	return s
}

func (s *sampler) setJobs(step string, jobs []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.step, s.jobs = step, map[string]bool{}
	for _, j := range jobs {
		s.jobs[j] = true
	}
	for j := range s.since {
		if !s.jobs[j] {
			delete(s.since, j)
		}
	}
}

func (s *sampler) run(ctx context.Context) {
	for ctx.Err() == nil {
		s.sample()
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (s *sampler) sample() {
	runs := s.f.runs()
	now := time.Now()
	on := map[string][]string{}
	for w, jobs := range runs {
		for _, j := range jobs {
			on[j] = append(on[j], w)
		}
	}
	double := appcheck.DoubleHeld(runs)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	for _, j := range slices.Sorted(maps.Keys(double)) {
		s.doubles = append(s.doubles, fmt.Sprintf("%.1fs (%s): %s runs on %s", now.Sub(s.start).Seconds(), s.step, j, strings.Join(double[j], " and ")))
	}
	for j := range s.jobs {
		_, running := on[j]
		from, open := s.since[j]
		switch {
		case running && open:
			s.gaps = append(s.gaps, gap{job: j, step: from.step, from: from.at.Sub(s.start), d: now.Sub(from.at)})
			delete(s.since, j)
		case running:
			s.ranOnce[j] = true
		case !open && s.ranOnce[j]:
			s.since[j] = opened{at: now, step: s.step}
		}
	}
}

// report prints every gap and fails on any job seen on two workers.
func (s *sampler) report(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for j, from := range s.since {
		s.gaps = append(s.gaps, gap{job: j, step: from.step + ", still open", from: from.at.Sub(s.start), d: now.Sub(from.at)})
	}
	sort.Slice(s.gaps, func(a, b int) bool { return s.gaps[a].from < s.gaps[b].from })
	var longest time.Duration
	for _, g := range s.gaps {
		t.Logf("gap: %-10s ran nowhere for %4.1f s from %5.1f s (%s)", g.job, g.d.Seconds(), g.from.Seconds(), g.step)
		longest = max(longest, g.d)
	}
	t.Logf("%d samples, %d gaps, longest %.1f s", s.samples, len(s.gaps), longest.Seconds())
	for i, d := range s.doubles {
		if i == 20 {
			t.Errorf("... and %d more", len(s.doubles)-20)
			break
		}
		t.Errorf("ran twice: %s", d)
	}
}

// TestExactlyOnceInWhatRuns runs a real `slipway swarm worker` process per
// worker pod (each mounting the ConfigMap with a lag of its own, as kubelets
// do), samples what each process runs every 0.2 s from its own jobs file,
// and goes through a scale up, a scale down, a middle worker lost, a worker
// cut off from the API server (its pod still Ready) and back, and a job list
// edit, in both refresh modes: no job may ever run on two workers; each gap
// (a job running nowhere) is printed.
func TestExactlyOnceInWhatRuns(t *testing.T) {
	t.Parallel() // a namespace of its own (see TestMain)
	for _, refresh := range []string{swarmv1.RefreshReload, swarmv1.RefreshRestart} {
		t.Run(refresh, func(t *testing.T) {
			t.Parallel() // a pool of its own
			p := newPoolWith(t, refresh == swarmv1.RefreshReload, false)
			p.applyAdmission(context.Background()) // the workers report with their own tokens, confined
			f := newFleet(t, p, refresh == swarmv1.RefreshRestart)
			jobs := jobNames(0, 24)
			p.statefulSetOf(3, workerTemplate())
			p.createSwarm(swarmv1.SwarmSpec{Jobs: jobs, Refresh: refresh})
			s := newSampler(f, jobs)
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); s.run(ctx) }()
			defer func() { cancel(); wg.Wait(); s.report(t) }()
			f.runsAll(p, 3, jobs)
			for _, step := range []struct {
				name string
				do   func()
				n    int
			}{
				{"scale 3 -> 5", func() { p.scale(5) }, 5},
				{"scale 5 -> 3", func() { p.scale(3) }, 3},
				{"swarm-worker-1 lost", func() { p.deletePod("swarm-worker-1") }, 3},
				{"swarm-worker-2 cut off from the API server", func() { f.partition("swarm-worker-2", true) }, 2},
				{"swarm-worker-2 back", func() { f.partition("swarm-worker-2", false) }, 3},
				{"jobs edited", func() {
					jobs = append(jobNames(4, 24), jobNames(30, 36)...)
					p.editSwarm(func(s *swarmv1.SwarmSpec) { s.Jobs = jobs })
				}, 3},
			} {
				s.setJobs(step.name, jobs)
				step.do()
				s.setJobs(step.name, jobs)
				f.runsAll(p, step.n, jobs)
				t.Logf("%s: converged", step.name)
			}
		})
	}
}

// runsAll waits until the Swarm says Converged over n workers and the
// worker processes run every job of jobs once.
func (f *fleet) runsAll(p *pool, n int, jobs []string) {
	f.t.Helper()
	p.waitFor(fmt.Sprintf("%d workers running every job", n), func(sw *swarmv1.Swarm) bool {
		if sw.Status.ObservedGeneration != sw.Generation || int(sw.Status.WorkerCount) != n ||
			!meta.IsStatusConditionTrue(sw.Status.Conditions, swarmv1.ConditionConverged) {
			return false
		}
		var all []string
		for _, js := range f.runs() {
			all = append(all, js...)
		}
		slices.Sort(all)
		want := slices.Sorted(slices.Values(jobs))
		return slices.Equal(all, want)
	})
}

// deletePod deletes a worker pod, as a lost node's pod is, and waits for
// its StatefulSet to bring it back under its name.
func (p *pool) deletePod(name string) {
	p.t.Helper()
	old := p.podUIDs()[name]
	if err := p.kube.CoreV1().Pods(p.ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		p.t.Fatal(err)
	}
	p.waitFor(name+" replaced", func(*swarmv1.Swarm) bool {
		u, ok := p.podUIDs()[name]
		return ok && u != old
	})
}
