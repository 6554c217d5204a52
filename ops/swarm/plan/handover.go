package plan

import (
	"maps"
	"slices"

	"slipway.dev/slipway/ops/swarm/config"
)

// runState is what the controller knows a worker may run.
type runState int

const (
	// mayRun: the worker may still run any job of its share or of an
	// earlier one (it has not reported its share's version).
	mayRun runState = iota
	// runsShare: the worker reported its share's version: it runs exactly
	// the share's jobs, none it released.
	runsShare
	// runsNothing: the worker's pod is gone (its containers stopped before
	// the API server let the pod go), or it lost its membership.
	runsNothing
)

// step is one handover step: the shares to write, the jobs this step took
// from a worker for another (moved), and the jobs the target places that
// still wait for their old worker to release them.
type step struct {
	shares          map[string]config.Workload
	moved, awaiting int
}

// handover moves the config in force (cur) one safe step toward target,
// revoking before it assigns, the way Kafka's cooperative rebalancing does:
//
//   - a worker that confirmed its share (or runs nothing) has its releasing
//     jobs released;
//   - a job the target takes from a worker is revoked: it leaves the
//     worker's jobs for its releasing list (released at once when the worker
//     runs nothing); a releasing job the target gives back returns;
//   - a job the target gives a worker is added only when no worker holds it,
//     as a job or as a releasing one. With whole set (restart mode, where a
//     change costs a restart) all the jobs are added in one step, once none
//     waits.
//
// A nil target (the pool is not settled) only records releases. Workers
// that leave keep an empty share until they released everything.
func handover(cur map[string]config.Workload, target map[string][]string, state func(string) runState, whole bool) step {
	st := step{shares: make(map[string]config.Workload, max(len(cur), len(target)))}
	placed := map[string]string{}
	for w, jobs := range target {
		for _, j := range jobs {
			placed[j] = w
		}
	}
	for _, w := range slices.Sorted(maps.Keys(cur)) {
		share, s := cur[w], state(w)
		if s != mayRun {
			share.Releasing = nil
		}
		if target == nil {
			st.shares[w] = share
			continue
		}
		tw, member := target[w]
		keep, revoked := split(share.Jobs, tw)
		back, still := split(share.Releasing, tw)
		for _, j := range revoked {
			if o, ok := placed[j]; ok && o != w {
				st.moved++
			}
		}
		if s == runsNothing {
			revoked = nil
		}
		share.Jobs = sorted(append(keep, back...))
		share.Releasing = sorted(append(still, revoked...))
		if !member && len(share.Jobs) == 0 && len(share.Releasing) == 0 {
			continue // left, and released everything
		}
		st.shares[w] = share
	}
	if target != nil {
		st.awaiting = st.assign(target, whole)
	}
	return st
}

// assign adds to each worker the jobs the target gives it that no worker
// holds, and returns how many must wait. With whole set nothing is added
// while any job waits: the change then makes two versions, the revocations
// and the assignments, and a worker is restarted once for it.
func (st *step) assign(target map[string][]string, whole bool) int {
	held := map[string]bool{}
	for _, share := range st.shares {
		for _, j := range share.Jobs {
			held[j] = true
		}
		for _, j := range share.Releasing {
			held[j] = true
		}
	}
	adds := map[string][]string{}
	awaiting, waitOn := 0, map[string]bool{}
	for w, jobs := range target {
		have := make(map[string]bool, len(st.shares[w].Jobs))
		for _, j := range st.shares[w].Jobs {
			have[j] = true
		}
		for _, j := range jobs {
			switch {
			case have[j]:
			case held[j]:
				awaiting++
				waitOn[w] = true
			default:
				adds[w] = append(adds[w], j)
			}
		}
	}
	for _, w := range slices.Sorted(maps.Keys(target)) {
		share, exists := st.shares[w]
		add := adds[w]
		if (whole && awaiting > 0) || (!exists && len(add) == 0 && waitOn[w]) {
			// hold back: a worker appears with its first jobs
			if !exists {
				continue
			}
			add = nil
		}
		share.Jobs = sorted(append(slices.Clone(share.Jobs), add...))
		st.shares[w] = share
	}
	if whole && awaiting > 0 {
		for _, add := range adds {
			awaiting += len(add)
		}
	}
	return awaiting
}

// split returns the jobs of jobs that are in keep, and the others.
func split(jobs, keep []string) (in, out []string) {
	set := make(map[string]bool, len(keep))
	for _, j := range keep {
		set[j] = true
	}
	for _, j := range jobs {
		if set[j] {
			in = append(in, j)
		} else {
			out = append(out, j)
		}
	}
	return in, out
}

// sorted sorts jobs in place; nil stays nil, and an empty list is kept
// empty (a share with no job is written as []).
func sorted(jobs []string) []string {
	slices.Sort(jobs)
	return jobs
}
