package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/workqueue"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
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
	f.stopController() // the test alone decides the slot
	node := f.ns + "-n0"
	f.channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: zeroDelay(),
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.ns}}})
	ctx := context.Background()
	ch := f.get()
	slot := v1.Slot{Node: node, Version: "v2", Attempt: 1, Phase: plan.PhaseUpgrading, Since: metav1.Now()}
	ch.Status.Updating = []v1.Slot{slot}
	stale, err := f.ops.OpsV1().UpdateChannels(f.ns).UpdateStatus(ctx, ch, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.showViews(t, stale)
	freed := stale.DeepCopy()
	plan.Fail(&freed.Status, node, "v2", "drain failed", time.Now())
	if _, err := f.ops.OpsV1().UpdateChannels(f.ns).UpdateStatus(ctx, freed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.showViews(t, freed)
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
	n, err := f.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
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
	a, err := New(Options{NodeName: node, Namespace: f.ns, SystemDir: f.systemDir(node), Config: env.Config,
		Image: "slipway:test", BootIDFile: f.bootFile(node), Rebooter: &stuckReboot{}, Log: testLog(f)})
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
	node := f.ns + "-n0"
	f.blockEviction(t, node)
	f.start(node)
	f.channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: zeroDelay(),
		Drain:        &v1.DrainSpec{Timeout: &metav1.Duration{Duration: 6 * time.Second}},
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.ns}}})
	f.waitNode(t, node, "the drain to begin", func(n *corev1.Node) bool { return drain.CordonedBy(n.Annotations) == protocol.CordonOwner })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // restart the controller and the agent every 2 s: each new controller resumes the drain
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Second):
				f.startController()
				f.restart(node, nil)
			}
		}
	}()
	ch := f.waitFor("the drain to fail within its timeout", 30*time.Second, func(ch *v1.UpdateChannel) bool {
		return plan.FindFailure(ch.Status, node) >= 0
	})
	cancel()
	if r := ch.Status.Failed[plan.FindFailure(ch.Status, node)].Reason; !strings.Contains(r, "drain") {
		t.Errorf("failure reason %q does not name the drain", r)
	}
	f.waitFor("the slot freed", 30*time.Second, func(ch *v1.UpdateChannel) bool { return len(ch.Status.Updating) == 0 })
	n, err := f.kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.Unschedulable || n.Annotations[protocol.AnnotationDrainStarted] != "" || drain.CordonedBy(n.Annotations) != "" {
		t.Errorf("node left cordoned or with its drain record after the failure: %v", n.Annotations)
	}
}

// blockEviction puts on node a pod owned by a controller and a
// PodDisruptionBudget that never allows its eviction.
func (f *fleet) blockEviction(t *testing.T, node string) {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: f.ns}}
	if _, err := f.kube.CoreV1().ServiceAccounts(f.ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err) // no controller-manager creates it here
	}
	yes := true
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: f.ns, Labels: map[string]string{"app": "guarded"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "guarded", UID: "0d1e7c5e-0000-4000-8000-000000000001", Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/fake"}}}}
	p, err := f.kube.CoreV1().Pods(f.ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	if _, err := f.kube.CoreV1().Pods(f.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: f.ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}}}}
	if _, err := f.kube.PolicyV1().PodDisruptionBudgets(f.ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No disruption controller runs here: the budget's status stays
	// unprocessed, and the Eviction API refuses (429) every eviction, once
	// it sees the budget: wait for that, so that no drain comes first. The
	// probe asks once per call: client-go would retry a 429 after its
	// Retry-After (10 s) up to 10 times, 100 s before it answers.
	dry := &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := f.kube.CoreV1().RESTClient().Post().Namespace(f.ns).Resource("pods").Name("guarded").SubResource("eviction").MaxRetries(0).
			Body(&policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: f.ns}, DeleteOptions: dry}).Do(ctx).Error()
		if apierrors.IsTooManyRequests(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Eviction API does not refuse the guarded pod's eviction: %v", err)
		}
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = f.kube.CoreV1().Pods(f.ns).Delete(context.Background(), "guarded", metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
}

// TestReregisteredNodeGetsItsVersionsAgain: a Node deleted and registered
// again (kubectl delete node; the kubelet comes back) is labelled with its
// versions again by its running agent.
func TestReregisteredNodeGetsItsVersionsAgain(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	node := f.ns + "-n0"
	f.start(node)
	hasVersion := func(n *corev1.Node) bool { return n.Labels[protocol.LabelRootfsVersion] == "v1" }
	f.waitNode(t, node, "labelled at start", hasVersion)
	ctx := context.Background()
	if err := f.kube.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.registerAgain(t, node)
	f.waitNode(t, node, "labelled again after it registered again", hasVersion)
}

// registerAgain creates node again, Ready, as a returning kubelet would.
func (f *fleet) registerAgain(t *testing.T, node string) {
	t.Helper()
	ctx := context.Background()
	for {
		n, err := f.kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node,
			Labels: map[string]string{"fleet": f.ns}}}, metav1.CreateOptions{})
		if err != nil {
			if ctx.Err() == nil && strings.Contains(err.Error(), "object is being deleted") {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			t.Fatal(err)
		}
		now := time.Now().UTC().Format(time.RFC3339)
		ready := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","lastTransitionTime":%q,"lastHeartbeatTime":%q}]}}`, now, now)
		if _, err := f.kube.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, []byte(ready), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
		return
	}
}

// waitNode polls node every 100 ms, up to 30 s, until cond holds.
func (f *fleet) waitNode(t *testing.T, node, what string, cond func(*corev1.Node) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := f.kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err == nil && cond(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s not %s within 30s (last read: %v, labels %v)", node, what, err, n.GetLabels())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestOneRebootingEventPerReboot: an agent restarted again and again while
// its reboot does not happen records one Rebooting Event, not one per restart.
func TestOneRebootingEventPerReboot(t *testing.T) {
	t.Parallel()
	r := &stuckReboot{}
	f := newFleet(t, 1, func(o *Options) { o.Rebooter = r })
	node := f.ns + "-n0"
	f.start(node)
	f.channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: zeroDelay(),
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.ns}}})
	f.waitFor("the Rebooting phase", time.Minute, func(ch *v1.UpdateChannel) bool {
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
		f.restart(node, nil)
		deadline := time.Now().Add(20 * time.Second)
		for r.calls.Load() == before { // the restarted agent asked for its reboot again
			if time.Now().After(deadline) {
				t.Fatalf("restart %d: the agent did not ask for its reboot again", i+1)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Events are posted asynchronously: wait for more than one, briefly.
	if n := f.eventsWithin("Rebooting", 2, 3*time.Second); n != 1 {
		t.Errorf("%d Rebooting events for one reboot and 5 agent restarts, want 1", n)
	}
}

// eventsWithin is events with a shorter wait.
func (f *fleet) eventsWithin(reason string, want int, wait time.Duration) int {
	deadline := time.Now().Add(wait)
	n := 0
	for time.Now().Before(deadline) {
		l, err := f.kube.CoreV1().Events(f.ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=" + reason})
		if err != nil {
			f.t.Fatal(err)
		}
		n = 0
		for _, e := range l.Items {
			n += int(max(e.Count, 1))
		}
		if n >= want {
			return n
		}
		time.Sleep(200 * time.Millisecond)
	}
	return n
}

func testLog(f *fleet) *slog.Logger {
	return slog.New(slog.NewTextHandler(f.logFile(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// TestRetryAfterFailedDrainReboots: a drain that fails after the Job
// swapped the system directory leaves the node labelled with what it still
// runs (its failure stays counted; the swap is rolled back), and the retry
// upgrades and reboots it instead of declaring it already up to date.
func TestRetryAfterFailedDrainReboots(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, func(o *Options) { o.Retry = plan.Retry{Base: 2 * time.Second, Max: 2 * time.Second} })
	node := f.ns + "-n0"
	f.blockEviction(t, node)
	f.start(node)
	f.channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: zeroDelay(),
		Drain:        &v1.DrainSpec{Timeout: &metav1.Duration{Duration: 3 * time.Second}},
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.ns}}})
	ch := f.waitFor("the drain to fail", time.Minute, func(ch *v1.UpdateChannel) bool { return plan.FindFailure(ch.Status, node) >= 0 })
	if jobs, err := f.kube.BatchV1().Jobs(f.ns).List(context.Background(), metav1.ListOptions{}); err != nil || len(jobs.Items) == 0 {
		t.Fatalf("no upgrade Job swapped the system directory (%v): the test tests nothing", err)
	}
	n, err := f.kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
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
	if err := f.kube.CoreV1().Pods(f.ns).Delete(context.Background(), "guarded", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	f.waitFor("the retry to upgrade the node", time.Minute, done(1))
	if b, _ := os.ReadFile(f.bootFile(node)); string(b) == "boot-0" {
		t.Error("the node counts as upgraded but never rebooted")
	}
	f.assertAllAt("v2")
}

// TestRestartBeforeCordonKeepsTheRunningVersions: an agent restarted after
// its upgrade Job swapped the system directory, but before it cordoned,
// does not label the node with the version it has not booted.
func TestRestartBeforeCordonKeepsTheRunningVersions(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	node := f.ns + "-n0"
	f.start(node)
	f.waitNode(t, node, "labelled v1 at start", func(n *corev1.Node) bool { return n.Labels[protocol.LabelRootfsVersion] == "v1" })
	f.stop(node)
	f.install(node, "v2") // the Job's swap
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "upgrade-" + node + "-v2-manual", Namespace: f.ns,
		Labels: map[string]string{protocol.LabelJobNode: protocol.LabelValue(node)}, Annotations: map[string]string{protocol.AnnotationJobNode: node}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "upgrade", Image: "slipway:test", Args: []string{"ops", "upgrade", "--version", "v2"}}}}}}}
	if _, err := f.kube.BatchV1().Jobs(f.ns).Create(context.Background(), job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.start(node)
	time.Sleep(3 * time.Second) // the agent starts in well under a second
	n, err := f.kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Labels[protocol.LabelRootfsVersion]; got != "v1" {
		t.Errorf("node labelled %s after a restart before its reboot; it still runs v1", got)
	}
}
