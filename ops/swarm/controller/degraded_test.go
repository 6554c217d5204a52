package controller

import (
	"context"
	"slices"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/swarm/assign"
)

// TestLosingWorkersDoesNotFreeze runs real worker processes (as
// TestExactlyOnceInWhatRuns does) over a pool with two dedicated jobs:
//   - a worker lost (cut off: its Lease lapses) leaves two workers, too few
//     for two dedicated jobs and the others: the assignment is degraded, not
//     frozen: every job but the lost worker's dedicated one runs again,
//     Balanced=False Degraded with a Warning Event;
//   - an invalid edit (a job listed twice) made while a scale up hands jobs
//     over leaves the last valid assignment whole: the handover completes
//     and every job runs, Invalid=True meanwhile.
//
// No job ever runs on two workers.
func TestLosingWorkersDoesNotFreeze(t *testing.T) {
	t.Parallel() // a namespace of its own (see TestMain)
	p := newPoolWith(t, true, false)
	p.applyAdmission(context.Background())
	f := newFleet(t, p, false)
	jobs := jobNames(0, 14)
	p.statefulSetOf(3, workerTemplate())
	p.createSwarm(swarmv1.SwarmSpec{Jobs: jobs, Dedicated: []string{"stream-00", "stream-01"}, Refresh: swarmv1.RefreshReload})
	s := newSampler(f, jobs)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); s.run(ctx) }()
	defer func() { cancel(); wg.Wait(); s.report(t) }()
	f.runsAll(p, 3, jobs)

	victim := p.holder("stream-01")
	s.setJobs(victim+" lost", jobs)
	f.partition(victim, true)
	placed := slices.DeleteFunc(slices.Clone(jobs), func(j string) bool { return j == "stream-01" })
	s.setJobs(victim+" lost", placed)
	f.runsAll(p, 2, placed)
	sw := p.waitFor("Balanced=False Degraded", func(sw *swarmv1.Swarm) bool { return hasReason(sw, swarmv1.ConditionBalanced, ReasonDegraded) })
	if c := meta.FindStatusCondition(sw.Status.Conditions, swarmv1.ConditionBalanced); c.Status != "False" {
		t.Errorf("Balanced: %+v", c)
	}
	p.waitEvent(ReasonDegraded)
	t.Logf("%s lost: degraded, every job but stream-01 runs", victim)

	f.partition(victim, false)
	s.setJobs(victim+" back", jobs)
	f.runsAll(p, 3, jobs)

	s.setJobs("scale 3 -> 4, an invalid edit mid-handover", jobs)
	p.scale(4)
	p.waitFor("a handover in flight", func(sw *swarmv1.Swarm) bool { return hasReason(sw, swarmv1.ConditionBalanced, "HandingOver") })
	p.editSwarm(func(s *swarmv1.SwarmSpec) { s.Jobs = append(slices.Clone(jobs), "stream-03") })
	p.waitInvalid(assign.ReasonDuplicateJob)
	f.runsAll(p, 4, jobs)
	t.Log("the handover made before the invalid edit completed")
}

// holder is the worker whose share holds job.
func (p *pool) holder(job string) string {
	p.t.Helper()
	cfg, _ := p.config()
	for w, share := range cfg.Workloads {
		if slices.Contains(share.Jobs, job) {
			return w
		}
	}
	p.t.Fatalf("no worker holds %s: %+v", job, cfg.Workloads)
	return ""
}
