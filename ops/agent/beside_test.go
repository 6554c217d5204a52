package agent

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// Tests of the drain asked beside an activation Job (beside.go): the node
// asks for its drain as its slot's Job (which only activates) is created,
// and reboots once both are done.

// stagedSpec is a one-node channel to v2 whose node stages ahead (the
// default permit), so its slot's Job only activates.
func stagedSpec(f *fleet) v1.UpdateChannelSpec {
	return v1.UpdateChannelSpec{URL: "file:///m", Version: "v2", RebootDelay: fleettest.ZeroDelay(), NodeSelector: f.Selector()}
}

// closedWindow is a maintenance window that opens in two hours.
func closedWindow() *v1.Window {
	return &v1.Window{Start: time.Now().UTC().Add(2 * time.Hour).Format("15:04"), End: time.Now().UTC().Add(3 * time.Hour).Format("15:04")}
}

// channelStagedAhead creates the channel of spec under a closed window,
// waits until its node staged v2 ahead, then opens the window: the slot's
// Job then only activates, with the drain asked beside it. Created open,
// the slot may be granted before the staging permit, and the slot's Job
// is then a download Job with no drain beside it.
func (f *fleet) channelStagedAhead(spec v1.UpdateChannelSpec) {
	f.T.Helper()
	spec.Window = closedWindow()
	f.Channel(spec)
	f.WaitFor("v2 staged ahead", time.Minute, func(ch *v1.UpdateChannel) bool { return ch.Status.Counts.Staged == 1 })
	f.Patch(`{"spec":{"window":null}}`)
}

// slottedWithAgentStopped has node stage v2 ahead (its slot's Job then
// only activates) under a window that allows no slot, stops its agent,
// opens the window, and waits until the controller gives the node its slot
// (Upgrading), no Job created yet. It returns the release of the node's
// held slot Jobs (holdJobs).
func (f *fleet) slottedWithAgentStopped(node string) func(bool) {
	f.T.Helper()
	release := f.HoldJobs(node)
	f.Start(node)
	spec := stagedSpec(f)
	spec.Window = closedWindow()
	f.Channel(spec)
	f.WaitFor("v2 staged ahead", time.Minute, func(ch *v1.UpdateChannel) bool { return ch.Status.Counts.Staged == 1 })
	f.Stop(node)
	f.Patch(`{"spec":{"window":null}}`)
	f.slotPhase(node, plan.PhaseUpgrading)
	return release
}

// slottedNoController is a one-node fleet whose node was given its slot
// and shown it with its agent stopped (slottedWithAgentStopped), and
// whose controller is stopped then: no drain from there on, so no cordon
// and no Rebooting. It returns the release of the node's held slot Jobs.
func slottedNoController(t *testing.T) (f *fleet, node string, release func(bool)) {
	t.Helper()
	f = newFleet(t, 1, nil)
	node = f.NS + "-n0"
	release = f.slottedWithAgentStopped(node)
	f.slotShown(node)
	f.StopController()
	return f, node, release
}

// swapped waits until node's activation swapped to v2.
func (f *fleet) swapped(node string) {
	f.T.Helper()
	for deadline := time.Now().Add(10 * time.Second); f.Current(node) != "v2"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			f.T.Fatal("the activation did not swap")
		}
	}
}

// slotShown waits until node's view shows its slot.
func (f *fleet) slotShown(node string) {
	f.T.Helper()
	f.WaitAgentSees(f.T, node, "shown its slot", func(views map[types.UID]protocol.View, _ protocol.Reports) bool {
		for _, v := range views {
			if v.Slot != nil {
				return true
			}
		}
		return false
	})
}

// slotPhase waits until node's slot shows phase in the channel's status.
func (f *fleet) slotPhase(node, phase string) {
	f.T.Helper()
	f.WaitFor("the slot "+phase, time.Minute, func(ch *v1.UpdateChannel) bool {
		i := plan.FindSlot(ch.Status, node)
		return i >= 0 && ch.Status.Updating[i].Phase == phase
	})
}

// bootOf is node's boot ID as its simulated host has it.
func (f *fleet) bootOf(node string) string {
	b, err := os.ReadFile(f.BootFile(node))
	if err != nil {
		f.T.Fatal(err)
	}
	return string(b)
}

// noReboot fails the test when node reboots, or shows a version staged,
// within window (its Job is held: nothing swapped, so nothing may say so).
func (f *fleet) noReboot(node, boot string, window time.Duration) {
	f.T.Helper()
	for deadline := time.Now().Add(window); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if b := f.bootOf(node); b != boot {
			f.T.Fatalf("node %s rebooted (boot %s) while its activation Job still ran", node, b)
		}
		if v := f.Staged(node); v != "" {
			f.T.Fatalf("node %s shows %s staged before its Job swapped anything", node, v)
		}
	}
}

// TestActivationBesideTheDrain: the node's drain is asked while its slot's
// activation Job runs (slipway's cordon on the node before the Job ends);
// drained (Rebooting), the node does not reboot while the Job runs, nor
// after its agent is killed and started again in that state; once the Job
// succeeds it reboots and ends at v2, uncordoned.
func TestActivationBesideTheDrain(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	node := f.NS + "-n0"
	release := f.HoldJobs(node)
	f.Start(node)
	f.channelStagedAhead(stagedSpec(f))
	f.WaitNode(t, node, "cordoned while its activation Job runs", func(n *corev1.Node) bool {
		return drain.CordonedBy(n.Annotations) == protocol.CordonOwner
	})
	f.slotPhase(node, plan.PhaseRebooting)
	boot := f.bootOf(node)
	f.noReboot(node, boot, 3*time.Second)
	f.Restart(node, nil) // killed between the drain's end and the Job's
	f.noReboot(node, boot, 2*time.Second)
	release(true)
	f.WaitFor("the node at v2", time.Minute, fleettest.Done(1))
	f.AssertAllAt("v2")
	slots, _, _ := f.JobsByAction()
	if js := slots[node]; len(js) != 1 || protocol.ArgAfterFlag(js[0].Spec.Template.Spec.Containers[0].Args, "--phase") != "activate" {
		t.Errorf("slot Jobs %d, want one that only activates", len(js))
	}
}

// TestFailedActivationAfterTheDrain: the activation Job fails after the
// node was drained for it (Rebooting): the node does not reboot, its slot
// is freed with the Job's failure recorded, and slipway's cordon is lifted.
func TestFailedActivationAfterTheDrain(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	node := f.NS + "-n0"
	release := f.HoldJobs(node)
	f.Start(node)
	f.channelStagedAhead(stagedSpec(f))
	f.slotPhase(node, plan.PhaseRebooting)
	boot := f.bootOf(node)
	release(false)
	f.failedAndUncordoned(node, boot)
}

// TestFailedActivationMidDrain: the activation Job fails while the drain
// it was asked beside is still blocked (a PodDisruptionBudget): the slot is
// freed with the Job's failure (not a drain timeout's, long after), and
// slipway's cordon is lifted.
func TestFailedActivationMidDrain(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	node := f.NS + "-n0"
	release := f.HoldJobs(node)
	f.BlockEviction(t, node)
	f.Start(node)
	spec := stagedSpec(f)
	spec.Drain = &v1.DrainSpec{Timeout: &metav1.Duration{Duration: 5 * time.Minute}}
	f.channelStagedAhead(spec)
	f.WaitNode(t, node, "cordoned while its activation Job runs", func(n *corev1.Node) bool {
		return drain.CordonedBy(n.Annotations) == protocol.CordonOwner
	})
	boot := f.bootOf(node)
	release(false)
	f.failedAndUncordoned(node, boot)
}

// failedAndUncordoned waits for node's failure (its slot Job's) and for its
// cordon to be lifted, and wants it not rebooted.
func (f *fleet) failedAndUncordoned(node, boot string) {
	f.T.Helper()
	ch := f.WaitFor("the failure recorded", 30*time.Second, func(ch *v1.UpdateChannel) bool {
		return plan.FindFailure(ch.Status, node) >= 0 && plan.FindSlot(ch.Status, node) < 0
	})
	if r := ch.Status.Failed[plan.FindFailure(ch.Status, node)].Reason; !strings.Contains(r, "upgrade pod") {
		f.T.Errorf("failure %q, want the upgrade Pod's", r)
	}
	f.WaitNode(f.T, node, "uncordoned", func(n *corev1.Node) bool {
		return !n.Spec.Unschedulable && drain.CordonedBy(n.Annotations) == "" && n.Annotations[protocol.AnnotationDrainStarted] == ""
	})
	if b := f.bootOf(node); b != boot {
		f.T.Errorf("node rebooted (boot %s) after its activation failed", b)
	}
}

// TestSwapPublishedWhileTheDrainWaits: the drain asked beside the
// activation is blocked; the Job swaps after the drain request was
// written (which could not say so): the node shows v2 staged all the same,
// its agent is killed and started again between the Job's success and
// the reboot, and once the drain can finish the node reboots and ends at v2.
func TestSwapPublishedWhileTheDrainWaits(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	node := f.NS + "-n0"
	release := f.HoldJobs(node)
	f.BlockEviction(t, node)
	f.Start(node)
	spec := stagedSpec(f)
	spec.Drain = &v1.DrainSpec{Timeout: &metav1.Duration{Duration: 5 * time.Minute}}
	f.channelStagedAhead(spec)
	f.WaitNode(t, node, "cordoned while its activation Job runs", func(n *corev1.Node) bool {
		return drain.CordonedBy(n.Annotations) == protocol.CordonOwner
	})
	if v := f.Staged(node); v != "" {
		t.Fatalf("%s shown staged before the Job swapped", v)
	}
	release(true)
	f.WaitNode(t, node, "v2 swapped in and shown staged, still cordoned", func(n *corev1.Node) bool {
		return drain.CordonedBy(n.Annotations) == protocol.CordonOwner && f.Staged(node) == "v2" &&
			n.Labels[protocol.LabelRootfsVersion] == "v1"
	})
	f.Restart(node, nil) // killed between the Job's success and the reboot
	zero := int64(0)
	if err := f.Kube.CoreV1().Pods(f.NS).Delete(context.Background(), "guarded", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	f.WaitFor("the node at v2", time.Minute, fleettest.Done(1))
	f.AssertAllAt("v2")
}

// TestDrainAskedAfterARestartBesideTheJob: an agent killed after it
// created its activation Job and before it asked for its drain asks for it
// when it starts again, while the Job still runs.
func TestDrainAskedAfterARestartBesideTheJob(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	node := f.NS + "-n0"
	release := f.slottedWithAgentStopped(node)
	a := f.inertAgent(t, node) // the agent up to its Job's create, then killed
	a.recorder = &record.FakeRecorder{}
	var sc *stepCtx
	for deadline := time.Now().Add(30 * time.Second); sc == nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the inert agent's cache never showed its slot")
		}
		if ch, err := a.getChannel("default"); err == nil {
			if seen, _ := a.mySlot(ch, v1.Slot{}); seen != nil {
				s, _ := plan.Resolve(ch.Spec)
				sc = &stepCtx{ch: ch, s: s, slot: *seen}
			}
		}
	}
	if !a.activateOnly(sc.slot) {
		t.Fatal("v2 is not staged ahead: the slot's Job would download")
	}
	ready, stopHolding := a.holdWork() // as syncNode does before a slot's steps
	if !ready {
		t.Fatal("the inert agent's Job and pod caches are not filled")
	}
	if err := a.stepCreateJob(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
	stopHolding()
	if n := f.Node(node); drain.CordonedBy(n.Annotations) != "" {
		t.Fatal("cordoned before the agent started again")
	}
	f.Start(node)
	f.WaitNode(t, node, "cordoned while its activation Job runs", func(n *corev1.Node) bool {
		return drain.CordonedBy(n.Annotations) == protocol.CordonOwner
	})
	release(true)
	f.WaitFor("the node at v2", time.Minute, fleettest.Done(1))
}

// TestNoDrainBesideADownload: a slot Job that downloads (nothing staged
// ahead) runs before the drain is asked: the node is not cordoned while it
// runs. With the drain off, a node whose Job only activates reports no
// Rebooting before its Job is done.
func TestNoDrainBesideADownload(t *testing.T) {
	t.Parallel()
	t.Run("download", func(t *testing.T) {
		t.Parallel()
		f := newFleet(t, 1, nil)
		node := f.NS + "-n0"
		release := f.HoldJobs(node)
		f.Start(node)
		spec := stagedSpec(f)
		spec.Prestage = &v1.PrestageSpec{Concurrency: new(0)}
		f.Channel(spec)
		f.slotPhase(node, plan.PhaseUpgrading)
		f.neverCordoned(node, 3*time.Second)
		release(true)
		f.WaitFor("the node at v2", time.Minute, fleettest.Done(1))
	})
	t.Run("drain off", func(t *testing.T) {
		t.Parallel()
		f := newFleet(t, 1, nil)
		node := f.NS + "-n0"
		release := f.HoldJobs(node)
		f.Start(node)
		spec := stagedSpec(f)
		spec.Drain = &v1.DrainSpec{Enabled: new(false)}
		f.Channel(spec)
		f.slotPhase(node, plan.PhaseUpgrading)
		f.Holds("no Rebooting while the Job runs", 3*time.Second, func(ch *v1.UpdateChannel) bool {
			i := plan.FindSlot(ch.Status, node)
			return i >= 0 && ch.Status.Updating[i].Phase == plan.PhaseUpgrading
		})
		f.neverCordoned(node, 0)
		release(true)
		f.WaitFor("the node at v2", time.Minute, fleettest.Done(1))
	})
}

// neverCordoned fails the test when node shows slipway's cordon within window (once when 0).
func (f *fleet) neverCordoned(node string, window time.Duration) {
	f.T.Helper()
	for deadline := time.Now().Add(window); ; time.Sleep(50 * time.Millisecond) {
		if n := f.Node(node); n.Spec.Unschedulable || drain.CordonedBy(n.Annotations) != "" {
			f.T.Fatalf("node %s cordoned while its slot's Job ran", node)
		}
		if time.Now().After(deadline) {
			return
		}
	}
}

// TestDrainLeavesTheActivationPod: the drain asked beside an activation
// runs while the Job's pod does; it must not evict that pod (the Job would
// fail, and with it the upgrade the drain is for). A PodDisruptionBudget
// holds the drain until the Job's pod is on the node, then lets it end.
func TestDrainLeavesTheActivationPod(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	node := f.NS + "-n0"
	release := f.HoldJobs(node)
	f.BlockEviction(t, node)
	f.Start(node)
	f.channelStagedAhead(stagedSpec(f))
	f.WaitNode(t, node, "cordoned while its activation Job runs", func(n *corev1.Node) bool {
		return drain.CordonedBy(n.Annotations) == protocol.CordonOwner
	})
	slots, _, _ := f.JobsByAction()
	if len(slots[node]) != 1 {
		t.Fatalf("slot Jobs of %s: %d, want 1", node, len(slots[node]))
	}
	pod := f.jobPod(t, node, slots[node][0])
	zero := int64(0)
	if err := f.Kube.CoreV1().Pods(f.NS).Delete(context.Background(), "guarded", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	f.slotPhase(node, plan.PhaseRebooting)
	p, err := f.Kube.CoreV1().Pods(f.NS).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("the activation Job's pod was evicted by the drain (%v)", err)
	}
	release(true)
	f.WaitFor("the node at v2", time.Minute, fleettest.Done(1))
}

// jobPod creates a running pod of Job j on node, as the Job controller and
// the kubelet would, and returns its name.
func (f *fleet) jobPod(t *testing.T, node string, j batchv1.Job) string {
	t.Helper()
	yes := true
	labels := map[string]string{}
	for k, v := range j.Spec.Template.Labels {
		labels[k] = v
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: j.Name + "-pod", Namespace: f.NS, Labels: labels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: j.Name, UID: j.UID, Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/fake"}}}}
	created, err := f.Kube.CoreV1().Pods(f.NS).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Phase = corev1.PodRunning
	if _, err := f.Kube.CoreV1().Pods(f.NS).UpdateStatus(context.Background(), created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return created.Name
}

// TestNoRepublishBeforeTheCordon: the activation swaps after the drain
// request and before any cordon (here no controller runs to cordon), and
// the Node changes: the agent does not publish the swap on that change (a
// write per slot the staged benchmark counted on a third of its nodes);
// it publishes it once the drain has been slow for plan.SlowStep.
func TestNoRepublishBeforeTheCordon(t *testing.T) {
	t.Parallel()
	f, node, release := slottedNoController(t)
	f.Start(node)
	f.WaitAgentSees(t, node, "asked for its drain", func(_ map[types.UID]protocol.View, r protocol.Reports) bool {
		for _, rep := range r {
			if rep.Phase == plan.PhaseDraining {
				return true
			}
		}
		return false
	})
	release(true)
	f.swapped(node)
	swapped := time.Now()
	if err := f.PatchNodeLabel(node, "poke", "1"); err != nil { // a change of the Node: the agent's republish runs
		t.Fatal(err)
	}
	for time.Since(swapped) < 1500*time.Millisecond {
		if n := f.Node(node); f.Staged(node) != "" && !n.Spec.Unschedulable {
			t.Fatalf("the swap published on the next change of the Node, %s after it, before any cordon", time.Since(swapped).Round(time.Millisecond))
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.WaitNode(t, node, "the swap published once the drain was slow", func(n *corev1.Node) bool {
		return f.Staged(node) == "v2"
	})
}

// TestNoRepublishBehindTheDrainRequest: a change of the Node queues a
// publish while the drain request's write is in flight (here held), and
// the activation swaps meanwhile. The publish waits for that write; it
// must then see the drain asked and leave the swap to the slot's writes,
// as TestNoRepublishBeforeTheCordon's does. It had read "drain asked"
// before it waited, and wrote the swap right after the request: a write
// per slot on a quarter of the staged benchmark's nodes, in the bursts.
func TestNoRepublishBehindTheDrainRequest(t *testing.T) {
	t.Parallel()
	f, node, release := slottedNoController(t)
	held, letGo := make(chan struct{}), make(chan struct{})
	var holding atomic.Bool
	holding.Store(true)
	f.opts = func(o *Options) {
		if o.Config == nil { // the controller's options
			return
		}
		cfg := rest.CopyConfig(o.Config)
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if r.Method == http.MethodPatch && strings.HasSuffix(r.URL.Path, "/nodeupdates/"+node+"/status") && r.Body != nil {
					body, err := io.ReadAll(r.Body)
					if err != nil {
						return nil, err
					}
					r.Body = io.NopCloser(bytes.NewReader(body))
					if bytes.Contains(body, []byte(plan.PhaseDraining)) && holding.CompareAndSwap(true, false) {
						close(held)
						<-letGo
					}
				}
				return rt.RoundTrip(r)
			})
		})
		o.Config = cfg
	}
	f.Start(node)
	select {
	case <-held:
	case <-time.After(time.Minute):
		t.Fatal("the agent did not ask for its drain")
	}
	release(true)
	f.swapped(node)
	if err := f.PatchNodeLabel(node, "poke", "1"); err != nil { // a change of the Node: the agent's republish runs, and waits
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	close(letGo)
	for let := time.Now(); time.Since(let) < 1500*time.Millisecond; time.Sleep(50 * time.Millisecond) {
		if f.Staged(node) != "" {
			t.Fatalf("the swap published %s after the drain request, by a publish that waited on it", time.Since(let).Round(time.Millisecond))
		}
	}
}
