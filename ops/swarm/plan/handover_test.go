package plan

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/swarm/config"
)

func TestHandover(t *testing.T) {
	w := func(v int64, jobs []string, releasing ...string) config.Workload {
		return config.Workload{Jobs: jobs, Version: v, Releasing: releasing}
	}
	states := func(m map[string]runState) func(string) runState { return func(w string) runState { return m[w] } }
	for _, tc := range []struct {
		name   string
		cur    map[string]config.Workload
		target map[string][]string
		state  map[string]runState
		whole  bool
		want   map[string]config.Workload
		moved  int
		wait   int
	}{{
		name:   "a moved job is revoked first, given to nobody",
		cur:    map[string]config.Workload{"a": w(1, []string{"x", "y"})},
		target: map[string][]string{"a": {"x"}, "b": {"y"}},
		want:   map[string]config.Workload{"a": w(1, []string{"x"}, "y")},
		moved:  1, wait: 1,
	}, {
		name:   "released once its old worker reports its share: then given",
		cur:    map[string]config.Workload{"a": w(2, []string{"x"}, "y")},
		target: map[string][]string{"a": {"x"}, "b": {"y"}},
		state:  map[string]runState{"a": runsShare},
		want:   map[string]config.Workload{"a": w(2, []string{"x"}), "b": w(0, []string{"y"})},
	}, {
		name:   "not yet reported: still waits",
		cur:    map[string]config.Workload{"a": w(2, []string{"x"}, "y"), "b": w(2, []string{})},
		target: map[string][]string{"a": {"x"}, "b": {"y"}},
		want:   map[string]config.Workload{"a": w(2, []string{"x"}, "y"), "b": w(2, []string{})},
		wait:   1,
	}, {
		name:   "a gone worker's jobs move at once",
		cur:    map[string]config.Workload{"a": w(1, []string{"x"}), "b": w(1, []string{"y"})},
		target: map[string][]string{"b": {"x", "y"}},
		state:  map[string]runState{"a": runsNothing, "b": runsShare},
		want:   map[string]config.Workload{"b": w(1, []string{"x", "y"})},
		moved:  1,
	}, {
		name:   "a leaving worker keeps an empty share until it released its jobs",
		cur:    map[string]config.Workload{"a": w(1, []string{"x"}), "b": w(1, []string{"y"})},
		target: map[string][]string{"b": {"x", "y"}},
		want:   map[string]config.Workload{"a": w(1, []string{}, "x"), "b": w(1, []string{"y"})},
		moved:  1, wait: 1,
	}, {
		name:   "a releasing job the target gives back returns",
		cur:    map[string]config.Workload{"a": w(2, []string{"x"}, "y")},
		target: map[string][]string{"a": {"x", "y"}},
		want:   map[string]config.Workload{"a": w(2, []string{"x", "y"})},
	}, {
		name:  "unsettled (no target): releases only",
		cur:   map[string]config.Workload{"a": w(2, []string{"x"}, "y"), "b": w(1, []string{"z"}, "q")},
		state: map[string]runState{"a": runsShare},
		want:  map[string]config.Workload{"a": w(2, []string{"x"}), "b": w(1, []string{"z"}, "q")},
	}, {
		name:   "reload: free jobs are added while others wait",
		cur:    map[string]config.Workload{"a": w(2, []string{"x"}, "y"), "b": w(1, []string{})},
		target: map[string][]string{"a": {"x"}, "b": {"y", "n"}},
		want:   map[string]config.Workload{"a": w(2, []string{"x"}, "y"), "b": w(1, []string{"n"})},
		wait:   1,
	}, {
		name:   "restart: a worker gets its new jobs all at once",
		cur:    map[string]config.Workload{"a": w(2, []string{"x"}, "y"), "b": w(1, []string{})},
		target: map[string][]string{"a": {"x"}, "b": {"y", "n"}},
		whole:  true,
		want:   map[string]config.Workload{"a": w(2, []string{"x"}, "y"), "b": w(1, []string{})},
		wait:   2,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			st := handover(tc.cur, tc.target, states(tc.state), tc.whole)
			if !(config.Config{Workloads: st.shares}).Equal(config.Config{Workloads: tc.want}) || st.moved != tc.moved || st.awaiting != tc.wait {
				t.Errorf("got %+v moved %d awaiting %d, want %+v moved %d awaiting %d", st.shares, st.moved, st.awaiting, tc.want, tc.moved, tc.wait)
			}
		})
	}
}

// TestNoJobRunsTwice drives Decide through random scale changes, lost
// workers and job-list edits, with simulated reload workers that each
// apply the config at their own time (or not at all for a while): after
// every step no job runs on two workers, and once the workers keep up,
// every job runs exactly once.
func TestNoJobRunsTwice(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		sim := newSim(rng)
		for range 60 {
			sim.event()
			sim.decide(t)
			sim.workersApply(0.4)
			sim.check(t, seed)
		}
		for range 20 {
			sim.decide(t)
			sim.workersApply(1)
			sim.check(t, seed)
		}
		if !sim.last.Converged || sim.last.Unassigned != 0 && len(sim.runs) > 0 {
			t.Fatalf("seed %d: not converged once the workers kept up: %+v", seed, sim.last)
		}
	}
}

type simWorker struct {
	runs    []string
	applied int64
}

type sim struct {
	rng  *rand.Rand
	in   Input
	runs map[string]*simWorker
	last Decision
	next int
}

func newSim(rng *rand.Rand) *sim {
	s := &sim{rng: rng, runs: map[string]*simWorker{}}
	s.in = Input{Jobs: jobs(rng.IntN(30)), Settled: true, StableNames: true, Refresh: swarmv1.RefreshReload, MaxUnavailable: 1, Now: now}
	for range 1 + rng.IntN(5) {
		s.add()
	}
	return s
}

func (s *sim) add() {
	name := fmt.Sprintf("w-%d", s.next)
	s.next++
	s.runs[name] = &simWorker{applied: NoneApplied}
}

// event changes the pool or the jobs; a worker removed stops first (its
// pod is gone only once its containers stopped).
func (s *sim) event() {
	switch s.rng.IntN(6) {
	case 0:
		s.add()
	case 1, 2:
		if names := slices.Sorted(maps.Keys(s.runs)); len(names) > 0 {
			delete(s.runs, names[s.rng.IntN(len(names))])
		}
	case 3:
		s.in.Jobs = jobs(s.rng.IntN(30))
	case 4:
		s.in.Settled = !s.in.Settled
	}
}

func (s *sim) decide(t *testing.T) {
	t.Helper()
	s.in.Pods = nil
	for name, w := range s.runs {
		s.in.Pods = append(s.in.Pods, Pod{Name: name, UID: name, Ready: true, Applied: w.applied})
	}
	d, err := Decide(s.in)
	if err != nil {
		t.Fatal(err)
	}
	s.in.Previous, s.in.Status = d.Config, swarmv1.SwarmStatus{Version: d.Config.Version, Workers: d.Workers}
	s.last = d
	if !s.in.Settled && s.rng.IntN(3) == 0 {
		s.in.Settled = true
	}
}

// workersApply lets each worker, with probability p, apply its share as
// the config now says (a kubelet syncing its volume at its own time).
func (s *sim) workersApply(p float64) {
	for name, w := range s.runs {
		if share, ok := s.in.Previous.Workloads[name]; ok && s.rng.Float64() < p {
			w.runs, w.applied = slices.Clone(share.Jobs), share.Version
		}
	}
}

func (s *sim) check(t *testing.T, seed uint64) {
	t.Helper()
	on := map[string]string{}
	for name, w := range s.runs {
		for _, j := range w.runs {
			if other, dup := on[j]; dup {
				t.Fatalf("seed %d: job %s runs on %s and %s", seed, j, other, name)
			}
			on[j] = name
		}
	}
}
