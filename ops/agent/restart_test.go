package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// Tests of an agent that survives its own restarts and stale caches.

// TestNoCordonOnAStaleSlot: an agent handed a cached channel that still
// shows its slot, which the API server already freed (its drain failed a
// moment ago), must neither cordon nor drain.
func TestNoCordonOnAStaleSlot(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	f.StopController() // the test alone decides the slot
	node := f.NS + "-n0"
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(),
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS}}})
	ctx := context.Background()
	ch := f.Get()
	slot := v1.Slot{Node: node, Version: "v2", Attempt: 1, Phase: plan.PhaseUpgrading, Since: metav1.Now()}
	ch.Status.Updating = []v1.Slot{slot}
	stale, err := f.Ops.OpsV1().UpdateChannels(f.NS).UpdateStatus(ctx, ch, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.ShowViews(t, stale)
	freed := stale.DeepCopy()
	plan.Fail(&freed.Status, node, "v2", "drain failed", time.Now())
	if _, err := f.Ops.OpsV1().UpdateChannels(f.NS).UpdateStatus(ctx, freed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.ShowViews(t, freed)
	if plan.FindSlot(freed.Status, node) >= 0 {
		t.Fatal("plan.Fail left the slot in place: the test would not test a freed slot")
	}
	a := f.inertAgent(t, node)
	s, bad := plan.Resolve(stale.Spec)
	if bad != nil {
		t.Fatal(bad)
	}
	_, err = a.stepDrain(ctx, &stepCtx{ch: stale, s: s, slot: slot})
	if !errors.Is(err, errSlotGone) {
		t.Errorf("the drain step on a freed slot: %v, want errSlotGone", err)
	}
	n, err := f.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.Unschedulable || drain.CordonedBy(n.Annotations) != "" {
		t.Errorf("node cordoned on a slot the API server had freed: unschedulable=%v annotations=%v", n.Spec.Unschedulable, n.Annotations)
	}
}

// inertAgent is an agent with its caches running but no workers: the test
// calls its steps directly.
func (f *fleet) inertAgent(t *testing.T, node string) *Agent {
	t.Helper()
	a, err := New(Options{NodeName: node, Namespace: f.NS, SystemDir: f.SystemDir(node), Config: env.Config,
		Image: "slipway:test", BootIDFile: f.BootFile(node), Rebooter: &stuckReboot{}, Log: testLog(f)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	a.queue = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[key]())
	t.Cleanup(a.queue.ShutDown)
	if err := a.startInformers(ctx); err != nil {
		t.Fatal(err)
	}
	return a
}

// stuckReboot is a reboot request that never reboots (a node that hangs on
// its way down); it counts the requests.
type stuckReboot struct{ calls atomic.Int32 }

func (r *stuckReboot) String() string               { return "a reboot that never happens" }
func (r *stuckReboot) Reboot(context.Context) error { r.calls.Add(1); return nil }

// TestDrainTimeoutSurvivesRestarts: a drain a PodDisruptionBudget blocks
// fails after drain.timeout counted from when it began, although the
// controller draining it (and the node's agent) is restarted more often
// than that timeout.
func TestDrainTimeoutSurvivesRestarts(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	node := f.NS + "-n0"
	f.BlockEviction(t, node)
	f.Start(node)
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(),
		Drain:        &v1.DrainSpec{Timeout: &metav1.Duration{Duration: 6 * time.Second}},
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS}}})
	f.WaitNode(t, node, "the drain to begin", func(n *corev1.Node) bool { return drain.CordonedBy(n.Annotations) == protocol.CordonOwner })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // restart the controller and the agent every 2 s: each new controller resumes the drain
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Second):
				f.StartController()
				f.Restart(node, nil)
			}
		}
	}()
	ch := f.WaitFor("the drain to fail within its timeout", 30*time.Second, func(ch *v1.UpdateChannel) bool {
		return plan.FindFailure(ch.Status, node) >= 0
	})
	cancel()
	if r := ch.Status.Failed[plan.FindFailure(ch.Status, node)].Reason; !strings.Contains(r, "drain") {
		t.Errorf("failure reason %q does not name the drain", r)
	}
	f.WaitFor("the slot freed", 30*time.Second, func(ch *v1.UpdateChannel) bool { return len(ch.Status.Updating) == 0 })
	n, err := f.Kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.Unschedulable || n.Annotations[protocol.AnnotationDrainStarted] != "" || drain.CordonedBy(n.Annotations) != "" {
		t.Errorf("node left cordoned or with its drain record after the failure: %v", n.Annotations)
	}
}

// TestReregisteredNodeGetsItsVersionsAgain: a Node deleted and registered
// again (kubectl delete node; the kubelet comes back) is labelled with its
// versions again by its running agent.
func TestReregisteredNodeGetsItsVersionsAgain(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	node := f.NS + "-n0"
	f.Start(node)
	hasVersion := func(n *corev1.Node) bool { return n.Labels[protocol.LabelRootfsVersion] == "v1" }
	f.WaitNode(t, node, "labelled at start", hasVersion)
	ctx := context.Background()
	if err := f.Kube.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.registerAgain(t, node)
	f.WaitNode(t, node, "labelled again after it registered again", hasVersion)
}

// registerAgain creates node again, Ready, as a returning kubelet would.
func (f *fleet) registerAgain(t *testing.T, node string) {
	t.Helper()
	ctx := context.Background()
	for {
		n, err := f.Kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node,
			Labels: map[string]string{"fleet": f.NS}}}, metav1.CreateOptions{})
		if err != nil {
			if ctx.Err() == nil && strings.Contains(err.Error(), "object is being deleted") {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			t.Fatal(err)
		}
		now := time.Now().UTC().Format(time.RFC3339)
		ready := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","lastTransitionTime":%q,"lastHeartbeatTime":%q}]}}`, now, now)
		if _, err := f.Kube.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, []byte(ready), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
		return
	}
}

// TestOneRebootingEventPerReboot: an agent restarted again and again while
// its reboot does not happen records one Rebooting Event, not one per restart.
func TestOneRebootingEventPerReboot(t *testing.T) {
	t.Parallel()
	r := &stuckReboot{}
	f := newFleet(t, 1, func(o *Options) { o.Rebooter = r })
	node := f.NS + "-n0"
	f.Start(node)
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(),
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS}}})
	f.WaitFor("the Rebooting phase", time.Minute, func(ch *v1.UpdateChannel) bool {
		i := plan.FindSlot(ch.Status, node)
		return i >= 0 && ch.Status.Updating[i].Phase == plan.PhaseRebooting
	})
	// The controller marks the slot Rebooting once drained; the agent then asks for its reboot.
	for deadline := time.Now().Add(20 * time.Second); r.calls.Load() == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the agent did not ask for its reboot after its drain")
		}
	}
	for i := range 5 {
		before := r.calls.Load()
		f.Restart(node, nil)
		deadline := time.Now().Add(20 * time.Second)
		for r.calls.Load() == before { // the restarted agent asked for its reboot again
			if time.Now().After(deadline) {
				t.Fatalf("restart %d: the agent did not ask for its reboot again", i+1)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Events are posted asynchronously: wait for more than one, briefly.
	if n := f.EventsWithin("Rebooting", 2, 3*time.Second); n != 1 {
		t.Errorf("%d Rebooting events for one reboot and 5 agent restarts, want 1", n)
	}
}

func testLog(f *fleet) *slog.Logger {
	return slog.New(slog.NewTextHandler(f.LogFile(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// TestRetryAfterFailedDrainReboots: a drain that fails after the Job
// swapped the system directory leaves the node labelled with what it still
// runs (its failure stays counted; the swap is rolled back), and the retry
// upgrades and reboots it instead of declaring it already up to date.
func TestRetryAfterFailedDrainReboots(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, func(o *Options) { o.Retry = plan.Retry{Base: 2 * time.Second, Max: 2 * time.Second} })
	node := f.NS + "-n0"
	f.BlockEviction(t, node)
	f.Start(node)
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(),
		Drain:        &v1.DrainSpec{Timeout: &metav1.Duration{Duration: 3 * time.Second}},
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS}}})
	ch := f.WaitFor("the drain to fail", time.Minute, func(ch *v1.UpdateChannel) bool { return plan.FindFailure(ch.Status, node) >= 0 })
	if slots, stages, _ := f.JobsByAction(); len(slots[node])+len(stages[node]) == 0 {
		t.Fatal("no upgrade or staging run (Pod or Job) touched the system directory: the test tests nothing")
	}
	n, err := f.Kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Labels[protocol.LabelRootfsVersion]; got != "v1" {
		t.Errorf("after the failed drain the node is labelled %s; it has not rebooted and still runs v1", got)
	}
	if ch.Status.Counts.UpToDate != 0 {
		t.Errorf("counts %+v: a node that has not rebooted is not up to date", ch.Status.Counts)
	}
	zero := int64(0)
	if err := f.Kube.CoreV1().Pods(f.NS).Delete(context.Background(), "guarded", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	f.WaitFor("the retry to upgrade the node", time.Minute, fleettest.Done(1))
	if b, _ := os.ReadFile(f.BootFile(node)); string(b) == "boot-0" {
		t.Error("the node counts as upgraded but never rebooted")
	}
	f.AssertAllAt("v2")
}

// TestRestartBeforeCordonKeepsTheRunningVersions: an agent restarted after
// its upgrade Job swapped the system directory, but before it cordoned,
// does not label the node with the version it has not booted.
func TestRestartBeforeCordonKeepsTheRunningVersions(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	node := f.NS + "-n0"
	f.Start(node)
	f.WaitNode(t, node, "labelled v1 at start", func(n *corev1.Node) bool { return n.Labels[protocol.LabelRootfsVersion] == "v1" })
	f.Stop(node)
	f.Install(node, "v2") // the Job's swap
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "upgrade-" + node + "-v2-manual", Namespace: f.NS,
		Labels: map[string]string{protocol.LabelJobNode: protocol.LabelValue(node)}, Annotations: map[string]string{protocol.AnnotationJobNode: node}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "upgrade", Image: "slipway:test", Args: []string{"ops", "upgrade", "--version", "v2"}}}}}}}
	if _, err := f.Kube.BatchV1().Jobs(f.NS).Create(context.Background(), job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.Start(node)
	time.Sleep(3 * time.Second) // the agent starts in well under a second
	n, err := f.Kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Labels[protocol.LabelRootfsVersion]; got != "v1" {
		t.Errorf("node labelled %s after a restart before its reboot; it still runs v1", got)
	}
}

// TestUnplannedRebootAfterTheSwap: the node reboots on its own (power
// loss, a panic, an admin's reboot) after its Job swapped, while its drain
// still runs (a PodDisruptionBudget holds it). It runs the target on a new
// boot: it waits for Ready and succeeds, uncordoned, without being drained
// and rebooted a second time.
func TestUnplannedRebootAfterTheSwap(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	node := f.NS + "-n0"
	f.BlockEviction(t, node)
	f.Start(node)
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(),
		Drain:        &v1.DrainSpec{Timeout: &metav1.Duration{Duration: 30 * time.Minute}},
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS}}})
	f.WaitFor("the slot Draining", time.Minute, func(ch *v1.UpdateChannel) bool {
		i := plan.FindSlot(ch.Status, node)
		return i >= 0 && ch.Status.Updating[i].Phase == plan.PhaseDraining
	})
	f.WaitNode(t, node, "the drain begun and v2 swapped in", func(n *corev1.Node) bool {
		return drain.CordonedBy(n.Annotations) == protocol.CordonOwner && f.Current(node) == "v2"
	})
	f.Restart(node, func() { // the unplanned reboot
		if err := os.WriteFile(f.BootFile(node), []byte("boot-unplanned"), 0o644); err != nil {
			t.Error(err)
		}
	})
	f.WaitFor("the node counted at v2, its slot freed, no failure", 90*time.Second, func(ch *v1.UpdateChannel) bool {
		return ch.Status.Counts.UpToDate == 1 && len(ch.Status.Updating) == 0 && len(ch.Status.Failed) == 0
	})
	f.WaitNode(t, node, "uncordoned at v2", func(n *corev1.Node) bool {
		return !n.Spec.Unschedulable && drain.CordonedBy(n.Annotations) == "" && n.Labels[protocol.LabelRootfsVersion] == "v2"
	})
	if b, _ := os.ReadFile(f.BootFile(node)); string(b) != "boot-unplanned" {
		t.Errorf("the node was rebooted again (boot %q) though it ran the target already", b)
	}
}

// TestReregisteredNodeOnTheSameBootKeepsWhatRuns: a swap is staged (v2 in
// `current`) while the node runs v1; its Node is deleted and registered
// again (bare: no record of what this boot runs), and its agent restarts
// on the same boot. The agent reads what this boot runs from its record in
// the host's /run/k3os (cleared by every boot), not from `current`: the
// node is labelled v1 with v2 staged, not v2.
func TestReregisteredNodeOnTheSameBootKeepsWhatRuns(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, func(o *Options) { o.BootRecordDir = filepath.Join(filepath.Dir(o.SystemDir), "run") })
	node := f.NS + "-n0"
	f.Start(node)
	f.WaitNode(t, node, "labelled v1", func(n *corev1.Node) bool { return n.Labels[protocol.LabelRootfsVersion] == "v1" })
	f.Stop(node)
	f.Install(node, "v2") // staged for the next boot; this boot still runs v1
	if err := f.Kube.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.registerAgain(t, node)
	f.Start(node)
	f.WaitNode(t, node, "labelled v1 running, v2 staged", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelRootfsVersion] == "v1" && f.Staged(node) == "v2"
	})
}
