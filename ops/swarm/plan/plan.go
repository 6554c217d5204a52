// Package plan holds the swarm controller's decisions as pure functions:
// which pods are workers, the new workers' config (through package assign),
// which workers to restart now, and each worker's phase. The controller only
// gathers the inputs from the API server and carries the decision out.
package plan

import (
	"maps"
	"slices"
	"time"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/swarm/assign"
	"slipway.dev/slipway/ops/swarm/config"
)

// NoneApplied is Pod.Applied for a worker that reports no version yet.
const NoneApplied = -1

// Pod is what the decisions need of a worker pod.
type Pod struct {
	Name string
	UID  string
	// Ready is the pod's Ready condition, false while it terminates.
	Ready bool
	// Applied is the version the worker reports it applied, or NoneApplied.
	Applied int64
	// Foreign marks a pod that holds a share but is not (or no longer) a
	// pod of the selected workloads: never given jobs, but running what it
	// was given until it reports otherwise or is gone.
	Foreign bool
	// Lapsed marks a worker whose Lease went unrenewed for its duration:
	// it stopped its jobs (package member), whatever its pod's state, and
	// takes none until it renews it.
	Lapsed bool
	// Released marks a worker whose Lease has no holder: its worker
	// stopped its jobs and left (or has not taken it yet); it runs nothing,
	// but stays a worker while its pod is Ready.
	Released bool
}

// Input is everything one decision reads.
type Input struct {
	Jobs, Dedicated []string
	// Pods are the pods of the selected StatefulSets and Deployments.
	Pods []Pod
	// Settled is true when every selected workload runs its desired number
	// of Ready pods (or has been unsettled too long to wait): only then are
	// jobs reassigned, so one scale event makes one new version.
	Settled bool
	// StableNames is true when every workload is a StatefulSet: a restarted
	// pod comes back under its name, so it keeps its share meanwhile.
	StableNames bool
	// Previous is the workers' config in force (empty when there is none).
	Previous config.Config
	// Status is the Swarm's status in force.
	Status swarmv1.SwarmStatus
	// Refresh and MaxUnavailable are the spec's, defaulted.
	Refresh        string
	MaxUnavailable int
	// RestartTimeout is how long a restarted worker keeps its share while
	// it is away.
	RestartTimeout time.Duration
	Now            time.Time
}

// Decision is what to write and do.
type Decision struct {
	// Config is the workers' config to be in force; Changed says it differs
	// from Input.Previous and must be written.
	Config  config.Config
	Changed bool
	// Moved is the number of jobs this step took from a worker for
	// another; Unassigned the jobs no worker runs (moving ones included);
	// Awaiting the jobs the assignment places that wait for their old
	// worker to stop them first.
	Moved, Unassigned, Awaiting int
	// Restart are the pods to delete now.
	Restart []string
	// Fence are the workers judged to run nothing (Lease lapsed, pod gone)
	// whose jobs this config releases: before it is written, their Leases
	// must say that they may run no older config (package member).
	Fence []string
	// Workers is the new status.workers.
	Workers []swarmv1.WorkerStatus
	// Converged is true when every worker runs its share.
	Converged bool
	// LeftOut are the dedicated jobs the Ready workers are too few to run
	// alone (assign.Fit): the assignment is degraded, the rest placed.
	LeftOut []string
}

// Decide computes the decision. An *assign.Error means the input cannot be
// assigned: the previous config stays in force. Too few workers for the
// dedicated jobs is no error: the assignment is degraded (Decision.LeftOut).
func Decide(in Input) (Decision, error) {
	pods := make(map[string]Pod, len(in.Pods))
	for _, p := range in.Pods {
		pods[p.Name] = p
	}
	in.Previous = distrustEdits(in.Previous, in.Status)
	restarting := stillRestarting(in, pods)
	var target map[string][]string
	d := Decision{}
	if in.Settled {
		fit, out := assign.Fit(assign.Input{
			Jobs: in.Jobs, Workers: workers(in, pods, restarting), Previous: in.Previous.Owners(), Dedicated: in.Dedicated,
		})
		res, err := assign.Assign(fit)
		if err != nil {
			return Decision{}, err
		}
		target, d.LeftOut = res.Assignments, out
	}
	st := handover(in.Previous.Workloads, target, stateOf(in.Previous, pods), in.Refresh == swarmv1.RefreshRestart)
	d.Config, d.Changed = nextConfig(in, st.shares)
	d.Moved, d.Awaiting = st.moved, st.awaiting
	d.Unassigned = unassigned(in.Jobs, d.Config)
	d.Workers, d.Restart, d.Converged = refresh(in, d.Config, pods, restarting)
	if d.Changed {
		d.Fence = fence(in.Previous, stateOf(in.Previous, pods))
	}
	d.Converged = d.Converged && st.awaiting == 0 && (in.Settled || d.Unassigned == 0)
	return d, nil
}

// fence lists the workers of c judged to run nothing that hold jobs there.
func fence(c config.Config, state func(string) runState) []string {
	var out []string
	for _, w := range slices.Sorted(maps.Keys(c.Workloads)) {
		if s := c.Workloads[w]; state(w) == runsNothing && len(s.Jobs)+len(s.Releasing) > 0 {
			out = append(out, w)
		}
	}
	return out
}

// stateOf tells, from a worker's pod, what it may run of its share in c.
func stateOf(c config.Config, pods map[string]Pod) func(string) runState {
	return func(w string) runState {
		p, ok := pods[w]
		switch {
		case !ok || p.Lapsed || p.Released:
			return runsNothing
		case p.Applied != NoneApplied && p.Applied == c.Workloads[w].Version:
			return runsShare
		}
		return mayRun
	}
}

// workers are the names of the Ready pods and of the restarted ones still
// away, sorted.
func workers(in Input, pods map[string]Pod, restarting map[string]swarmv1.WorkerStatus) []string {
	var out []string
	for name, p := range pods {
		if p.Ready && !p.Foreign && !p.Lapsed {
			out = append(out, name)
		}
	}
	for name := range restarting {
		if p, ok := pods[name]; !ok || !p.Ready {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// stillRestarting are the workers the controller restarted that are not
// back yet (a Ready pod of another UID under the name), with their status;
// a restart older than RestartTimeout, or of a pod that cannot come back
// under its name, is given up.
func stillRestarting(in Input, pods map[string]Pod) map[string]swarmv1.WorkerStatus {
	out := map[string]swarmv1.WorkerStatus{}
	for _, w := range in.Status.Workers {
		if w.Phase != swarmv1.PhaseRestarting || w.RestartedAt == nil {
			continue
		}
		at := w.RestartedAt.Time
		p, exists := pods[w.Pod]
		back := exists && p.Ready && p.UID != w.RestartedUID
		gone := !exists && !in.StableNames
		if back || gone || in.Now.Sub(at) > in.RestartTimeout {
			continue
		}
		out[w.Pod] = w
	}
	return out
}

// nextConfig builds the config of the shares: a worker whose job set is
// unchanged keeps its version, the others get the next version; a config
// that only releases jobs or drops empty shares keeps its version. Changed
// is false when the shares are those of in.Previous.
func nextConfig(in Input, shares map[string]config.Workload) (config.Config, bool) {
	next := config.Config{Version: max(in.Previous.Version, in.Status.Version) + 1, Workloads: make(map[string]config.Workload, len(shares))}
	same, sameJobs := len(shares) == len(in.Previous.Workloads), true
	for w, share := range shares {
		prev, ok := in.Previous.Workloads[w]
		if ok && prev.Version > 0 && config.SameJobs(prev.Jobs, share.Jobs) {
			share.Version = prev.Version
			same = same && config.SameJobs(prev.Releasing, share.Releasing)
		} else {
			share.Version = next.Version
			same, sameJobs = false, false
		}
		next.Workloads[w] = share
	}
	for w, prev := range in.Previous.Workloads {
		if _, kept := shares[w]; !kept && len(prev.Jobs) > 0 {
			sameJobs = false // a worker gone with its jobs
		}
	}
	switch {
	case same && in.Previous.Version > 0:
		return in.Previous, false
	case sameJobs && in.Previous.Version > 0:
		next.Version = in.Previous.Version
	}
	return next, true
}

// unassigned counts the jobs no worker of c holds.
func unassigned(jobs []string, c config.Config) int {
	held := map[string]bool{}
	for _, w := range c.Workloads {
		for _, j := range w.Jobs {
			held[j] = true
		}
	}
	n := 0
	for _, j := range jobs {
		if !held[j] {
			n++
		}
	}
	return n
}

// refresh gives every worker of c its phase and, in restart mode, picks the
// workers to restart now: Ready pods that applied another version of their
// share, by name, as many as MaxUnavailable leaves room for; or, first, the
// workers marked Restarting whose pod was not deleted after all.
func refresh(in Input, c config.Config, pods map[string]Pod, restarting map[string]swarmv1.WorkerStatus) ([]swarmv1.WorkerStatus, []string, bool) {
	var out []swarmv1.WorkerStatus
	var candidates, again []string
	converged := true
	for _, name := range slices.Sorted(maps.Keys(c.Workloads)) {
		wl := c.Workloads[name]
		st := swarmv1.WorkerStatus{Pod: name, Jobs: int32(len(wl.Jobs)), JobsHash: JobsHash(wl.Jobs), Version: wl.Version, Phase: swarmv1.PhasePending}
		p, exists := pods[name]
		if exists && p.Applied != NoneApplied {
			st.SeenVersion = p.Applied
		}
		switch r, ok := restarting[name]; {
		case ok:
			st.Phase, st.RestartedAt, st.RestartedUID = swarmv1.PhaseRestarting, r.RestartedAt, r.RestartedUID
			if exists && p.Ready && p.UID == r.RestartedUID {
				again = append(again, name) // its deletion did not happen: delete it again
			}
		case exists && p.Applied == wl.Version:
			st.Phase = swarmv1.PhaseConverged
		case exists && p.Ready && p.Applied != NoneApplied:
			candidates = append(candidates, name)
		}
		converged = converged && st.Phase == swarmv1.PhaseConverged
		out = append(out, st)
	}
	if in.Refresh != swarmv1.RefreshRestart {
		return out, nil, converged
	}
	if len(again) > 0 {
		return out, again, converged
	}
	slots := max(0, in.MaxUnavailable-len(restarting))
	restart := candidates[:min(slots, len(candidates))]
	for i := range out {
		if slices.Contains(restart, out[i].Pod) {
			out[i].Phase, out[i].RestartedAt, out[i].RestartedUID = swarmv1.PhaseRestarting, timePtr(in.Now), pods[out[i].Pod].UID
		}
	}
	return out, restart, converged
}
