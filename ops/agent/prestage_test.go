package agent

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/upgrade"
	"slipway.dev/slipway/upgrade/layout"
)

// permitWatch records, from a watch of the channel, the most staging
// permits held at any instant.
type permitWatch struct {
	mu   sync.Mutex
	most int
	seen bool // a permit was ever held
}

func (f *fleet) watchPermits() *permitWatch {
	pw := &permitWatch{}
	ctx, cancel := context.WithCancel(context.Background())
	f.T.Cleanup(cancel)
	w, err := f.Ops.OpsV1().UpdateChannels(f.NS).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		f.T.Fatal(err)
	}
	go func() {
		for ev := range w.ResultChan() {
			if ch, ok := ev.Object.(*v1.UpdateChannel); ok {
				pw.mu.Lock()
				pw.most = max(pw.most, len(ch.Status.Staging))
				pw.seen = pw.seen || len(ch.Status.Staging) > 0
				pw.mu.Unlock()
			}
		}
	}()
	return pw
}

// watchStagedWithoutPermitBack records the nodes of the fleet seen with
// version staged published and no permit given back in their report: a
// node gives its permit back in the write that publishes what it staged,
// so no Node the API server serves shows the one without the other.
func (f *fleet) watchStagedWithoutPermitBack(version string) func() []string {
	var mu sync.Mutex
	seen := map[string]bool{}
	ctx, cancel := context.WithCancel(context.Background())
	f.T.Cleanup(cancel)
	w, err := f.Kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: "fleet=" + f.NS})
	if err != nil {
		f.T.Fatal(err)
	}
	note := func(node string, reports protocol.Reports) {
		back := false
		for _, r := range reports {
			back = back || r.PermitDone != nil
		}
		if !back {
			mu.Lock()
			seen[node] = true
			mu.Unlock()
		}
	}
	go func() {
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok || n.Annotations[protocol.AnnotationPrestagedVersion] != version {
				continue
			}
			reports, _ := protocol.ParseReports(n.Annotations[protocol.AnnotationSlotReport])
			note(n.Name, reports)
		}
	}()
	// An agent that reports in its NodeUpdate publishes there.
	wo, err := f.Ops.OpsV1().NodeUpdates(f.NS).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		f.T.Fatal(err)
	}
	go func() {
		for ev := range wo.ResultChan() {
			if u, ok := ev.Object.(*v1.NodeUpdate); ok && u.Status.PrestagedVersion == version {
				note(u.Name, protocol.ReportsOfStatus(u.Status))
			}
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Sorted(maps.Keys(seen))
	}
}

func (pw *permitWatch) get() (int, bool) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	return pw.most, pw.seen
}

// TestStagesAheadOfTheSlot: six nodes, one slot at a time, four staging at
// a time (each staging takes a second): every node stages before its slot,
// its slot's Job only activates, never more than four stage at once
// (sampled from the staging Jobs running and from the permits in status),
// status.counts.staged counts them on the way, and the channel completes
// with nothing staged left.
//
// Not parallel: run beside the other fleet tests it saw, twice in three
// runs, all six nodes' staging Jobs at once (its permits in status never
// above four); alone it never did. Until that is understood it runs alone.
func TestStagesAheadOfTheSlot(t *testing.T) {
	const n = 6
	f := newFleet(t, n, nil)
	f.StageTime = time.Second
	for i := range n {
		f.Start(fmt.Sprintf("%s-n%d", f.NS, i))
	}
	pw := f.watchPermits()
	apart := f.watchStagedWithoutPermitBack("v2")
	f.Channel(v1.UpdateChannelSpec{URL: "file:///m", Version: "v2", Concurrency: 1, RebootDelay: fleettest.ZeroDelay(),
		NodeSelector: f.Selector(), Prestage: &v1.PrestageSpec{Concurrency: new(4)}})
	f.WaitFor("a node counted as staged", time.Minute, func(ch *v1.UpdateChannel) bool { return ch.Status.Counts.Staged > 0 })
	ch := f.WaitFor("all nodes at v2", 2*time.Minute, fleettest.Done(n))
	f.AssertAllAt("v2")
	if most, _ := pw.get(); most > 4 || most == 0 {
		t.Errorf("at most %d staging permits held at once, want 1 to 4", most)
	}
	f.Mu.Lock()
	most := f.StagingMost
	f.Mu.Unlock()
	if most > 4 || most < 2 {
		t.Errorf("at most %d staging Jobs ran at once, want 2 to 4", most)
	}
	slots, stages, _ := f.JobsByAction()
	f.assertNoStagingJobs()
	for i := range n {
		node := fmt.Sprintf("%s-n%d", f.NS, i)
		if len(slots[node]) != 1 || len(stages[node]) != 1 {
			t.Errorf("%s: %d slot Jobs and %d staging Jobs, want one each", node, len(slots[node]), len(stages[node]))
			continue
		}
		slot, stage := slots[node][0], stages[node][0]
		if got := protocol.ArgAfterFlag(slot.Spec.Template.Spec.Containers[0].Args, "--phase"); got != "activate" {
			t.Errorf("%s: the slot's Job runs --phase %q, want activate (only the swap)", node, got)
		}
		if stage.Status.CompletionTime == nil || slot.CreationTimestamp.Before(stage.Status.CompletionTime) {
			t.Errorf("%s: the slot's Job was created %s, before its staging ended (%v)", node, slot.CreationTimestamp, stage.Status.CompletionTime)
		}
		if staged, _ := upgrade.Prestaged(f.SystemDir(node)); len(staged) != 0 {
			t.Errorf("%s: still staged after its upgrade: %v", node, staged)
		}
	}
	if nodes := apart(); len(nodes) > 0 {
		t.Errorf("nodes %v published v2 staged in a write of its own, then gave the permit back: want one write", nodes)
	}
	if len(ch.Status.Staging) != 0 || ch.Status.Counts.Staged != 0 {
		t.Errorf("after the rollout: permits %v, counts.staged %d; want none", ch.Status.Staging, ch.Status.Counts.Staged)
	}
	f.assertNoPrestageAnnotations()
}

// assertNoStagingJobs: under the policy isolation a staging run is a Pod
// of the agent's own, like a slot's work, not a Job the Job controller
// paces.
func (f *fleet) assertNoStagingJobs() {
	f.T.Helper()
	jobs, err := f.Kube.BatchV1().Jobs(f.NS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		f.T.Fatal(err)
	}
	for _, j := range jobs.Items {
		if j.Annotations[protocol.AnnotationJobAction] == protocol.JobActionStage {
			f.T.Errorf("staging ran as Job %s: want a Pod of the agent's own", j.Name)
		}
	}
}

func (f *fleet) assertNoPrestageAnnotations() {
	f.T.Helper()
	nodes, err := f.Kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: "fleet=" + f.NS})
	if err != nil {
		f.T.Fatal(err)
	}
	for _, n := range nodes.Items {
		for _, k := range []string{protocol.AnnotationPrestagedVersion, protocol.AnnotationPrestageFailedVersion} {
			if v, ok := n.Annotations[k]; ok {
				f.T.Errorf("node %s still has %s=%s", n.Name, k, v)
			}
		}
	}
	objs, err := f.Ops.OpsV1().NodeUpdates(f.NS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		f.T.Fatal(err)
	}
	for _, u := range objs.Items {
		if u.Status.PrestagedVersion != "" || u.Status.PrestageFailedVersion != "" {
			f.T.Errorf("the NodeUpdate of %s still has prestaged %q, failed %q", u.Name, u.Status.PrestagedVersion, u.Status.PrestageFailedVersion)
		}
	}
}

// TestPrestageOffIsTheSlotsUpgrade: spec.prestage.concurrency 0 rolls out
// as before staging ahead existed: no permit, no staging Job, slot Jobs
// that run the whole upgrade.
func TestPrestageOffIsTheSlotsUpgrade(t *testing.T) {
	t.Parallel()
	const n = 3
	f := newFleet(t, n, nil)
	for i := range n {
		f.Start(fmt.Sprintf("%s-n%d", f.NS, i))
	}
	pw := f.watchPermits()
	f.Channel(v1.UpdateChannelSpec{URL: "file:///m", Version: "v2", Concurrency: 2, RebootDelay: fleettest.ZeroDelay(),
		NodeSelector: f.Selector(), Prestage: &v1.PrestageSpec{Concurrency: new(0)}})
	f.WaitFor("all nodes at v2", 2*time.Minute, fleettest.Done(n))
	f.AssertAllAt("v2")
	if _, seen := pw.get(); seen {
		t.Error("a staging permit was given with prestage.concurrency 0")
	}
	slots, stages, prunes := f.JobsByAction()
	if len(stages) != 0 || len(prunes) != 0 {
		t.Errorf("staging Jobs %v, pruning Jobs %v; want none", stages, prunes)
	}
	for node, js := range slots {
		for _, j := range js {
			if got := protocol.ArgAfterFlag(j.Spec.Template.Spec.Containers[0].Args, "--phase"); got != "" {
				t.Errorf("%s: slot Job %s runs --phase %s, want the whole upgrade", node, j.Name, got)
			}
		}
	}
}

// TestTargetChangedMidStagingRemovesTheStaleStage: with the maintenance
// window closed no slot starts, but the nodes stage (staging disrupts
// nothing); the target changes from v2 to v3 while they stage: each node
// removes v2 (a pruning Job), stages v3, and what boots stays v1.
func TestTargetChangedMidStagingRemovesTheStaleStage(t *testing.T) {
	t.Parallel()
	const n = 3
	f := newFleet(t, n, nil)
	f.StageTime = 1500 * time.Millisecond
	for i := range n {
		f.Start(fmt.Sprintf("%s-n%d", f.NS, i))
	}
	closed := closedWindow()
	f.Channel(v1.UpdateChannelSpec{URL: "file:///m", Version: "v2", Concurrency: 1, RebootDelay: fleettest.ZeroDelay(),
		NodeSelector: f.Selector(), Window: closed, Prestage: &v1.PrestageSpec{Concurrency: new(n)}})
	f.WaitFor("staging permits", time.Minute, func(ch *v1.UpdateChannel) bool { return len(ch.Status.Staging) > 0 })
	// A permit shows before any node has begun: the change must come once
	// a v2 staging Job exists, or there is nothing stale to remove.
	waitForStagingJob(t, f)
	f.Patch(`{"spec":{"version":"v3"}}`)
	f.WaitFor("every node staged v3", 2*time.Minute, func(ch *v1.UpdateChannel) bool {
		return ch.Status.Counts.Staged == n && len(ch.Status.Updating) == 0 && len(ch.Status.Staging) == 0
	})
	_, stages, prunes := f.JobsByAction()
	if len(prunes) == 0 {
		t.Errorf("no pruning Job ran (staging Jobs: %d nodes): the change came after staging?", len(stages))
	}
	for i := range n {
		node := fmt.Sprintf("%s-n%d", f.NS, i)
		staged, err := upgrade.Prestaged(f.SystemDir(node))
		if err != nil || !slices.Equal(staged, []string{"v3"}) {
			t.Errorf("%s: staged %v (%v), want [v3]", node, staged, err)
		}
		if _, err := os.Stat(layout.New(f.SystemDir(node)).VersionDir(layout.Rootfs, "v2")); !os.IsNotExist(err) {
			t.Errorf("%s: the stale stage v2 is still there (%v); pruning Jobs %d", node, err, len(prunes[node]))
		}
		if got := f.Current(node); got != "v1" {
			t.Errorf("%s: current is %s, want v1 (staging never changes what boots)", node, got)
		}
	}
}

// waitForStagingJob waits until some node's agent has created a staging Job.
func waitForStagingJob(t *testing.T, f *fleet) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if _, stages, _ := f.JobsByAction(); len(stages) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no staging Job within a minute of the staging permits")
		}
	}
}
