package agent

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/upgrade/layout"
)

// TestFailedDrainRollsTheSwapBack: a drain that fails on a PDB that never
// allows, after the Job swapped the system directory, leaves the node
// labelled with what it runs, rolls the swap back so the next boot starts
// that version, and keeps the failure counted (Degraded at maxFailures 1).
func TestFailedDrainRollsTheSwapBack(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, func(o *Options) { o.Retry = plan.Retry{Base: time.Hour, Max: time.Hour} })
	node := f.NS + "-n0"
	f.BlockEviction(t, node)
	f.Start(node)
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(), MaxFailures: 1,
		Drain:        &v1.DrainSpec{Timeout: &metav1.Duration{Duration: 3 * time.Second}},
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS}}})
	f.WaitNode(t, node, "the swap staged v2 (on the cordon)", func(n *corev1.Node) bool {
		return f.Staged(node) == "v2" && n.Labels[protocol.LabelRootfsVersion] == "v1"
	})
	f.WaitFor("the drain to fail", time.Minute, func(ch *v1.UpdateChannel) bool { return plan.FindFailure(ch.Status, node) >= 0 })
	f.WaitNode(t, node, "rolled back: v1 runs, nothing staged", func(n *corev1.Node) bool {
		return f.Current(node) == "v1" && n.Labels[protocol.LabelRootfsVersion] == "v1" &&
			n.Labels[protocol.LabelStagedRootfsVersion] == "" && f.Staged(node) == "" && !n.Spec.Unschedulable
	})
	if n := f.EventsWithin("RollingBack", 1, 10*time.Second); n != 1 {
		t.Errorf("%d RollingBack events, want 1", n)
	}
	// The rollback Job's pod started a second time, as a Job's pod may be:
	// the links stay as the first run left them.
	f.startRollbackAgain(t, node)
	if cur := f.Current(node); cur != "v1" {
		t.Errorf("the rollback run twice left current %s, want v1", cur)
	}
	// The failure stays counted: nothing prunes it as "already at target".
	f.Holds("the failure counted", 6*time.Second, func(ch *v1.UpdateChannel) bool {
		return plan.FindFailure(ch.Status, node) >= 0 && ch.Status.Counts.UpToDate == 0
	})
	if !fleettest.IsTrue(f.Get(), v1.ConditionDegraded) {
		t.Errorf("not Degraded at maxFailures 1: %+v", f.Get().Status.Conditions)
	}
	if n := f.EventsWithin("RollingBack", 2, 2*time.Second); n != 1 {
		t.Errorf("%d RollingBack events after the second start, want 1", n)
	}
	// An unplanned reboot now starts v1, the version it ran.
	f.Restart(node, func() { _ = os.WriteFile(f.BootFile(node), []byte("boot-unplanned"), 0o644) })
	f.WaitNode(t, node, "v1 after an unplanned reboot", func(n *corev1.Node) bool {
		booted, _ := f.Versions(node)
		return n.Labels[protocol.LabelRootfsVersion] == "v1" && booted.BootID == "boot-unplanned"
	})
}

// startRollbackAgain runs the command of node's finished rollback Job a
// second time on the node (as Kubernetes may start a Job's pod twice) and
// wants it to succeed.
func (f *fleet) startRollbackAgain(t *testing.T, node string) {
	t.Helper()
	jobs, err := f.Kube.BatchV1().Jobs(f.NS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Items {
		if j.Annotations[protocol.AnnotationJobAction] == "rollback" && j.Annotations[protocol.AnnotationJobNode] == node && j.Status.Succeeded > 0 {
			if !f.RunRollback(node, j.Spec.Template.Spec.Containers[0].Args) {
				t.Fatalf("rollback Job %s started again failed", j.Name)
			}
			return
		}
	}
	t.Fatalf("no finished rollback Job of %s", node)
}

// TestDeletedChannelRollsTheSwapBack: the channel deleted while its node
// drains (after the swap): the swap is undone and the cordon lifted, and
// a RollingBack Event says so on the node's NodeUpdate (the channel is
// gone; one about the Node was dropped: the API admits those only in
// "default", outside slipway's namespace).
func TestDeletedChannelRollsTheSwapBack(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	node := f.NS + "-n0"
	f.BlockEviction(t, node)
	f.Start(node)
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(),
		Drain:        &v1.DrainSpec{Timeout: &metav1.Duration{Duration: 4 * time.Second}},
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS}}})
	f.WaitNode(t, node, "cordoned with v2 staged", func(n *corev1.Node) bool {
		return n.Spec.Unschedulable && f.Staged(node) == "v2"
	})
	if err := f.Ops.OpsV1().UpdateChannels(f.NS).Delete(context.Background(), "default", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.WaitNode(t, node, "rolled back and uncordoned", func(n *corev1.Node) bool {
		return f.Current(node) == "v1" && !n.Spec.Unschedulable && n.Labels[protocol.LabelRootfsVersion] == "v1" &&
			f.Staged(node) == ""
	})
	if n := f.EventsWithin("RollingBack", 1, 10*time.Second); n != 1 {
		t.Fatalf("%d RollingBack Events in %s for a channel gone, want 1", n, f.NS)
	}
	events, err := f.Kube.CoreV1().Events(f.NS).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=RollingBack"})
	if err != nil {
		t.Fatal(err)
	}
	if about := events.Items[0].InvolvedObject; about.Kind != "NodeUpdate" || about.Name != node || about.Namespace != f.NS {
		t.Errorf("the RollingBack Event is about %s %s/%s, want the node's NodeUpdate", about.Kind, about.Namespace, about.Name)
	}
}

// TestPlanUndo: a rollback undoes exactly the components whose current
// differs from what runs, each only when previous names what runs.
func TestPlanUndo(t *testing.T) {
	rk := []layout.Component{layout.Rootfs, layout.Kernel}
	for _, c := range []struct {
		name                       string
		running, current, previous Versions
		ours                       bool
		want                       []layout.Component // nil: no rollback
	}{
		{"rootfs and kernel staged", vs("v1", "v1", ""), vs("v2", "v2", ""), vs("v1", "v1", ""), true, rk},
		{"a release that kept the kernel: the kernel's links are not touched", vs("v1", "5.15", ""), vs("v2", "5.15", ""), vs("v1", "5.10", ""), true, []layout.Component{layout.Rootfs}},
		{"kernel without previous and unchanged", vs("v1", "k1", ""), vs("v2", "k1", ""), vs("v1", "", ""), true, []layout.Component{layout.Rootfs}},
		{"components.kernel false: the running kernel is kept", vs("v1", "v0", ""), vs("v2", "v0", ""), vs("v1", "v-1", ""), true, []layout.Component{layout.Rootfs}},
		{"components.k3s true: the staged k3s is undone too", vs("v1", "v1", "v1-k3s1"), vs("v2", "v2", "v2-k3s1"), vs("v1", "v1", "v1-k3s1"), true, layout.Components},
		{"k3s staged with a kept kernel", vs("v1", "k", "s1"), vs("v2", "k", "s2"), vs("v1", "k0", "s1"), true, []layout.Component{layout.Rootfs, layout.K3s}},
		{"previous names another rootfs", vs("v1", "v1", ""), vs("v3", "v3", ""), vs("v2", "v1", ""), true, nil},
		{"previous names another kernel", vs("v1", "v1", ""), vs("v2", "v2", ""), vs("v1", "v0", ""), true, nil},
		{"a first k3s: nothing to go back to", vs("v1", "v1", ""), vs("v2", "v2", "s1"), vs("v1", "v1", ""), true, nil},
		{"staged by hand", vs("v1", "v1", ""), vs("v2", "v2", ""), vs("v1", "v1", ""), false, nil},
		{"nothing staged", vs("v1", "v1", ""), vs("v1", "v1", ""), vs("v0", "v0", ""), true, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := planUndo(c.running, c.current, c.previous, c.ours)
			if d.Undo != (c.want != nil) || !slices.Equal(d.Components, c.want) || d.Reason == "" {
				t.Errorf("planUndo = %+v, want components %v", d, c.want)
			}
		})
	}
}

// vs is the versions of rootfs, kernel and k3s.
func vs(rootfs, kernel, k3s string) Versions {
	return Versions{Rootfs: rootfs, Kernel: kernel, K3s: k3s}
}

// TestRollbackJobArgs: the Job names every component, true or false, so
// `ops rollback` undoes exactly those (its default is rootfs and kernel),
// each only from its staged version (a pod started twice changes nothing).
func TestRollbackJobArgs(t *testing.T) {
	a, ch, _ := jobTestAgent(t)
	j := a.buildRollbackJob(ch, "rb", vs("v2", "6.1.0-56", "v1.31.2-k3s1"), "boot-7", 3, []layout.Component{layout.Rootfs, layout.K3s})
	args := j.Spec.Template.Spec.Containers[0].Args
	want := []string{"ops", "rollback", "--reboot=false", "--system-dir", jobSystemDir, "--lock-file", jobLockDir + "/upgrade.lock", "--remount",
		"--rootfs=true", "--kernel=false", "--k3s=true", "--from", "rootfs=v2", "--from", "k3s=v1.31.2-k3s1"}
	if !slices.Equal(args, want) {
		t.Errorf("args %v\nwant %v", args, want)
	}
	if j.Annotations[AnnotationRollbackBoot] != "boot-7" || j.Annotations[AnnotationRollbackAttempt] != "3" || j.Annotations[protocol.AnnotationJobAction] != "rollback" {
		t.Errorf("annotations %v", j.Annotations)
	}
	if a, b := rollbackJobName("n1", "v2", "boot-7", 1), rollbackJobName("n1", "v2", "boot-7", 2); a == b || !strings.HasPrefix(a, "rollback-2-n1-v2-") {
		t.Errorf("names %s, %s: one per attempt", a, b)
	}
}

// TestRollbackHistory: retries wait the retry backoff from the last
// failure; a running Job is waited for; a success starts a new count.
func TestRollbackHistory(t *testing.T) {
	t0 := time.Unix(1e9, 0)
	r := plan.Retry{Base: time.Minute, Max: 4 * time.Minute}
	failed := func(n int, at time.Time) rollbackRun {
		return rollbackRun{Name: "f", Attempt: n, Done: true, Failed: true, At: at}
	}
	for _, c := range []struct {
		name    string
		runs    []rollbackRun
		running bool
		next    int
		wait    time.Duration // at t0 + 30 s
	}{
		{"none yet", nil, false, 1, 0},
		{"one running", []rollbackRun{{Attempt: 1}}, true, 2, 0},
		{"one failed 30 s ago: the base backoff", []rollbackRun{failed(1, t0)}, false, 2, 30 * time.Second},
		{"two failed: doubled", []rollbackRun{failed(2, t0), failed(1, t0.Add(-time.Hour))}, false, 3, 90 * time.Second},
		{"four failed: capped", []rollbackRun{failed(1, t0), failed(2, t0), failed(3, t0), failed(4, t0)}, false, 5, 210 * time.Second},
		{"failed long ago: now", []rollbackRun{failed(1, t0.Add(-time.Hour))}, false, 2, 0},
		{"a success resets the count", []rollbackRun{failed(1, t0), {Attempt: 2, Done: true}}, false, 3, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := rollbackHistoryOf(c.runs)
			if h.running != c.running || h.next != c.next {
				t.Errorf("history %+v, want running %v next %d", h, c.running, c.next)
			}
			if got := h.wait(r, t0.Add(30*time.Second)); got != c.wait {
				t.Errorf("wait %s, want %s", got, c.wait)
			}
		})
	}
}

// TestFailedRollbackIsReportedAndRetried: a rollback Job that fails is
// reported (Event RollbackFailed), retried after the retry backoff under
// a new name, and the swap is then undone. (The retry backoff also brings
// the node's upgrade back after its failed drain: later rollbacks may
// follow, each of them succeeding.)
func TestFailedRollbackIsReportedAndRetried(t *testing.T) {
	t.Parallel()
	const backoff = 3 * time.Second
	f := newFleet(t, 1, func(o *Options) { o.Retry = plan.Retry{Base: backoff, Max: backoff} })
	node := f.NS + "-n0"
	fleettest.FailRollbacks.Store(node, 1)
	f.BlockEviction(t, node)
	f.Start(node)
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(), MaxFailures: 1,
		Drain:        &v1.DrainSpec{Timeout: &metav1.Duration{Duration: 3 * time.Second}},
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS}}})
	f.WaitNode(t, node, "the swap staged v2 (on the cordon)", func(n *corev1.Node) bool {
		return f.Staged(node) == "v2"
	})
	f.WaitNode(t, node, "rolled back on the second attempt: v1 runs, nothing staged", func(n *corev1.Node) bool {
		return f.Current(node) == "v1" && f.Staged(node) == "" && !n.Spec.Unschedulable
	})
	if n := f.EventsWithin("RollbackFailed", 1, 5*time.Second); n != 1 {
		t.Errorf("%d RollbackFailed events, want 1", n)
	}
	jobs, err := f.Kube.BatchV1().Jobs(f.NS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var failedAt, retriedAt time.Time
	for _, j := range jobs.Items {
		if j.Annotations[protocol.AnnotationJobAction] != "rollback" {
			continue
		}
		switch j.Annotations[AnnotationRollbackAttempt] {
		case "1":
			_, bad, _, at := protocol.JobOutcome(&j)
			if !bad {
				t.Errorf("attempt 1 (%s) did not fail", j.Name)
			}
			failedAt = at
		case "2":
			retriedAt = j.CreationTimestamp.Time
		} // later attempts: the node's upgrade was retried (same backoff), drained in vain and rolled back again

	}
	// Both times are in whole seconds.
	if failedAt.IsZero() || retriedAt.Sub(failedAt) < backoff-time.Second {
		t.Errorf("attempt 1 failed at %s, attempt 2 created at %s: want %s between", failedAt, retriedAt, backoff)
	}
}
