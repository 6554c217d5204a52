package plan

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/swarm/assign"
	"slipway.dev/slipway/ops/swarm/config"
)

var now = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func jobs(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("cam-%02d", i))
	}
	return out
}

func ready(name string, applied int64) Pod {
	return Pod{Name: name, UID: name + "-uid", Ready: true, Applied: applied}
}

// steady is the config and status of 12 jobs over w-0..w-2, all converged at version 1.
func steady(t *testing.T) (Input, Decision) {
	t.Helper()
	in := Input{
		Jobs: jobs(12), Pods: []Pod{ready("w-0", NoneApplied), ready("w-1", NoneApplied), ready("w-2", NoneApplied)},
		Settled: true, StableNames: true, Refresh: swarmv1.RefreshRestart, MaxUnavailable: 1,
		RestartTimeout: time.Minute, Now: now,
	}
	d, err := Decide(in)
	if err != nil || !d.Changed || d.Config.Version != 1 || len(d.Restart) != 0 || d.Converged {
		t.Fatalf("first decision: %+v, %v", d, err)
	}
	for i := range in.Pods {
		in.Pods[i].Applied = 1
	}
	in.Previous, in.Status = d.Config, swarmv1.SwarmStatus{Version: 1, Workers: d.Workers}
	return in, d
}

func TestSteadyStateChangesNothing(t *testing.T) {
	in, _ := steady(t)
	d, err := Decide(in)
	if err != nil || d.Changed || len(d.Restart) != 0 || !d.Converged {
		t.Errorf("steady state: %+v, %v", d, err)
	}
}

// Scaling up hands over cooperatively: version 2 revokes a job from each of
// w-0..w-2 (releasing, given to nobody) and restarts them one at a time;
// w-3 gets its three jobs, in one step, only once all three stopped them.
func TestScaleUpRevokesBeforeItAssigns(t *testing.T) {
	in, _ := steady(t)
	in.Pods = append(in.Pods, ready("w-3", NoneApplied))
	d, err := Decide(in)
	if err != nil || !d.Changed || d.Config.Version != 2 || d.Moved != 3 || d.Awaiting != 3 || d.Unassigned != 3 {
		t.Fatalf("scale up: %+v, %v", d, err)
	}
	if _, ok := d.Config.Workloads["w-3"]; ok {
		t.Errorf("w-3 got a share before its jobs were released: %+v", d.Config.Workloads["w-3"])
	}
	for _, w := range []string{"w-0", "w-1", "w-2"} {
		if s := d.Config.Workloads[w]; s.Version != 2 || len(s.Jobs) != 3 || len(s.Releasing) != 1 {
			t.Errorf("%s: %+v, want 3 jobs and 1 releasing at version 2", w, s)
		}
	}
	if !slices.Equal(d.Restart, []string{"w-0"}) || d.Converged {
		t.Errorf("want w-0 restarted first, got %v (converged %v)", d.Restart, d.Converged)
	}
	// w-0 is away: it runs nothing, so its releasing job is released; w-3
	// still waits for the others (restart mode gives a worker its jobs at once).
	next := func(d Decision) {
		in.Previous, in.Status = d.Config, swarmv1.SwarmStatus{Version: d.Config.Version, Workers: d.Workers}
	}
	next(d)
	in.Pods = slices.DeleteFunc(in.Pods, func(p Pod) bool { return p.Name == "w-0" })
	in.Now = now.Add(5 * time.Second)
	d, err = Decide(in)
	if err != nil || len(d.Restart) != 0 || len(d.Config.Workloads["w-0"].Releasing) != 0 || d.Awaiting != 3 {
		t.Fatalf("restart in flight: %+v, %v", d, err)
	}
	// w-0 back under a new UID with version 2: the next one goes.
	next(d)
	in.Pods = append(in.Pods, Pod{Name: "w-0", UID: "new", Ready: true, Applied: 2})
	d, err = Decide(in)
	if err != nil || !slices.Equal(d.Restart, []string{"w-1"}) || phase(d, "w-0") != swarmv1.PhaseConverged {
		t.Fatalf("after w-0 is back: restart %v, w-0 %s (%v)", d.Restart, phase(d, "w-0"), err)
	}
	// w-1 and w-2 report version 2 (as reload workers would): w-3 gets its jobs.
	next(d)
	for i := range in.Pods {
		if in.Pods[i].Name != "w-3" {
			in.Pods[i].Applied = 2
		}
	}
	in.Status.Workers[1].Phase, in.Status.Workers[1].RestartedAt = swarmv1.PhaseConverged, nil
	d, err = Decide(in)
	if err != nil || !d.Changed || d.Awaiting != 0 || d.Unassigned != 0 || len(d.Config.Workloads["w-3"].Jobs) != 3 || len(d.Restart) != 0 {
		t.Fatalf("once released: %+v, %v", d, err)
	}
	for w, s := range d.Config.Workloads {
		if len(s.Releasing) != 0 || (w != "w-3" && s.Version != 2) {
			t.Errorf("%s: %+v", w, s)
		}
	}
}

func phase(d Decision, pod string) string {
	for _, w := range d.Workers {
		if w.Pod == pod {
			return w.Phase
		}
	}
	return "absent"
}

func TestUnsettledKeepsTheAssignment(t *testing.T) {
	in, _ := steady(t)
	in.Settled = false
	in.Pods = in.Pods[:2] // w-2 gone while its StatefulSet brings it back
	in.Jobs = jobs(20)
	d, err := Decide(in)
	if err != nil || d.Changed || d.Unassigned != 8 {
		t.Errorf("unsettled: changed %v, unassigned %d, %v", d.Changed, d.Unassigned, err)
	}
}

func TestReloadRestartsNothing(t *testing.T) {
	in, _ := steady(t)
	in.Refresh = swarmv1.RefreshReload
	in.Jobs = jobs(15)
	d, err := Decide(in)
	if err != nil || !d.Changed || len(d.Restart) != 0 || d.Converged {
		t.Fatalf("reload: %+v, %v", d, err)
	}
	if d.Moved != 0 {
		t.Errorf("adding jobs moved %d", d.Moved)
	}
}

func TestRestartGivenUp(t *testing.T) {
	in, _ := steady(t)
	at := metav1.NewTime(now.Add(-2 * time.Minute))
	in.Status.Workers[1].Phase, in.Status.Workers[1].RestartedAt, in.Status.Workers[1].RestartedUID = swarmv1.PhaseRestarting, &at, "w-1-uid"
	in.Pods = slices.Delete(in.Pods, 1, 2)
	d, err := Decide(in)
	if err != nil || !d.Changed || len(d.Config.Workloads) != 2 || d.Moved != 4 || d.Awaiting != 0 {
		t.Errorf("a restart past its timeout: its worker, gone, leaves and its 4 jobs move at once: %+v, %v", d, err)
	}
	// A Deployment's pod never comes back under its name: it leaves at once.
	in, _ = steady(t)
	in.StableNames = false
	in.Status.Workers[1].Phase, in.Status.Workers[1].RestartedAt = swarmv1.PhaseRestarting, &metav1.Time{Time: now}
	in.Pods = slices.Delete(in.Pods, 1, 2)
	if d, err := Decide(in); err != nil || len(d.Config.Workloads) != 2 {
		t.Errorf("a Deployment's restarted pod kept its share: %+v, %v", d, err)
	}
}

func TestBadInputKeepsNothing(t *testing.T) {
	in, _ := steady(t)
	in.Jobs = append(in.Jobs, "cam-00")
	_, err := Decide(in)
	var e *assign.Error
	if !errors.As(err, &e) || e.Reason != assign.ReasonDuplicateJob {
		t.Errorf("duplicate job: %v", err)
	}
}

func TestNoWorkers(t *testing.T) {
	in, _ := steady(t)
	in.Pods = nil
	d, err := Decide(in)
	if err != nil || !d.Changed || len(d.Config.Workloads) != 0 || d.Unassigned != 12 || !d.Converged {
		t.Errorf("scaled to zero: %+v, %v", d, err)
	}
	in.Previous, in.Status = d.Config, swarmv1.SwarmStatus{Version: d.Config.Version}
	if d2, _ := Decide(in); d2.Changed {
		t.Errorf("zero workers twice changed the config: %+v", d2)
	}
}

func TestRestartRetriedWhenThePodWasNotDeleted(t *testing.T) {
	in, _ := steady(t)
	at := metav1.NewTime(now)
	in.Status.Workers[0].Phase, in.Status.Workers[0].RestartedAt, in.Status.Workers[0].RestartedUID = swarmv1.PhaseRestarting, &at, "w-0-uid"
	d, err := Decide(in)
	if err != nil || !slices.Equal(d.Restart, []string{"w-0"}) {
		t.Errorf("a Restarting worker whose pod is still the old one: restart %v, %v", d.Restart, err)
	}
}

// A ConfigMap edited by hand: the shares it changed get a new version, even
// when the assignment keeps them, so their workers refresh; the others keep theirs.
func TestHandEditRefreshesTheEditedWorkers(t *testing.T) {
	in, _ := steady(t)
	w0, w1 := in.Previous.Workloads["w-0"], in.Previous.Workloads["w-1"]
	edited := config.Config{Version: 1, Workloads: map[string]config.Workload{
		"w-0": {Jobs: append(slices.Clone(w0.Jobs[1:]), w1.Jobs[0]), Version: 1},
		"w-1": {Jobs: append(slices.Clone(w1.Jobs[1:]), w0.Jobs[0]), Version: 1},
		"w-2": in.Previous.Workloads["w-2"],
	}}
	in.Previous = edited
	d, err := Decide(in)
	if err != nil || !d.Changed || d.Config.Version != 2 {
		t.Fatalf("hand edit: %+v, %v", d, err)
	}
	for w, want := range map[string]int64{"w-0": 2, "w-1": 2, "w-2": 1} {
		if got := d.Config.Workloads[w].Version; got != want {
			t.Errorf("%s: version %d, want %d", w, got, want)
		}
	}
	if !slices.Equal(d.Restart, []string{"w-0"}) {
		t.Errorf("restart %v, want w-0 first", d.Restart)
	}
}

// A worker whose Lease lapsed stopped its jobs (it could not renew it): its
// jobs move at once, though its pod still looks Ready (a partitioned node's
// pods do until the node is marked NotReady).
func TestLapsedWorkerHandsOverAtOnce(t *testing.T) {
	in, _ := steady(t)
	in.Refresh = swarmv1.RefreshReload
	in.Pods[1].Lapsed = true
	d, err := Decide(in)
	if err != nil || !d.Changed || d.Moved != 4 || d.Awaiting != 0 || d.Unassigned != 0 {
		t.Fatalf("lapsed worker: %+v, %v", d, err)
	}
	if _, ok := d.Config.Workloads["w-1"]; ok {
		t.Errorf("the lapsed worker kept a share: %+v", d.Config.Workloads["w-1"])
	}
	// Without its Lease lapsed, a worker that is not Ready keeps its jobs
	// releasing until it reports or its pod is gone.
	in, _ = steady(t)
	in.Refresh = swarmv1.RefreshReload
	in.Pods[1].Ready = false
	d, err = Decide(in)
	if err != nil || d.Moved != 4 || d.Awaiting != 4 || len(d.Config.Workloads["w-1"].Releasing) != 4 {
		t.Fatalf("not Ready worker: %+v, %v", d, err)
	}
}

// TestLosingWorkersDegrades: with two dedicated jobs over three workers, a
// worker lost leaves two, too few: the decision is a degraded assignment
// (one dedicated job left out, everything else placed, the lost worker's
// jobs included), not a refusal that would freeze the pool.
func TestLosingWorkersDegrades(t *testing.T) {
	in := Input{
		Jobs: jobs(12), Dedicated: []string{"cam-00", "cam-01"},
		Pods:    []Pod{ready("w-0", NoneApplied), ready("w-1", NoneApplied), ready("w-2", NoneApplied)},
		Settled: true, StableNames: true, Refresh: swarmv1.RefreshReload, MaxUnavailable: 1, RestartTimeout: time.Minute, Now: now,
	}
	d, err := Decide(in)
	if err != nil || len(d.LeftOut) != 0 {
		t.Fatalf("three workers: %+v, %v", d, err)
	}
	var lost string
	for w, s := range d.Config.Workloads {
		if slices.Contains(s.Jobs, "cam-01") {
			lost = w
		}
	}
	in.Previous, in.Status = d.Config, swarmv1.SwarmStatus{Version: d.Config.Version, Workers: d.Workers}
	in.Pods = nil
	for _, w := range []string{"w-0", "w-1", "w-2"} {
		if w != lost {
			in.Pods = append(in.Pods, ready(w, d.Config.Version))
		}
	}
	d, err = Decide(in)
	if err != nil {
		t.Fatalf("a worker lost: %v", err)
	}
	if !slices.Equal(d.LeftOut, []string{"cam-01"}) {
		t.Errorf("left out %v, want the lost worker's dedicated cam-01 (cam-00 runs and stays)", d.LeftOut)
	}
	if d.Unassigned != 1 || d.Awaiting != 0 || !d.Changed {
		t.Errorf("want every job but cam-01 placed at once: %+v", d)
	}
	if _, ok := d.Config.Workloads[lost]; ok {
		t.Errorf("the lost worker %s kept a share", lost)
	}
}
