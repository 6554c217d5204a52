package controller

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// TestRacingAgentsNeverExceedConcurrency: 20 agents race for 3 slots while
// agents are killed and restarted at random moments.
func TestRacingAgentsNeverExceedConcurrency(t *testing.T) {
	t.Parallel()
	const nodes, concurrency = 20, 3
	f := newFleet(t, nodes, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := f.Watch(ctx)
	for i := range nodes {
		f.Start(fmt.Sprintf("%s-n%d", f.NS, i))
	}
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", Concurrency: concurrency, RebootDelay: fleettest.ZeroDelay(),
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS}}})
	go func() { // kill and restart agents mid-rollout
		for i := 0; i < 15 && ctx.Err() == nil; i++ {
			node := fmt.Sprintf("%s-n%d", f.NS, rand.IntN(nodes))
			f.Restart(node, nil)
			select {
			case <-ctx.Done():
			case <-time.After(400 * time.Millisecond):
			}
		}
	}()
	f.WaitFor("all 20 nodes at v2", 3*time.Minute, fleettest.Done(nodes))
	cancel()
	w.Check(t, concurrency)
	f.AssertAllAt("v2")
	// Events are best effort: an agent killed in the milliseconds between
	// freeing its slot and posting its Upgraded Event loses that Event (its
	// node is upgraded all the same, as assertAllAt checked). With 15
	// random kills, one such loss is tolerated; more means Events go missing.
	if n := f.Events("Upgraded", nodes-1); n < nodes-1 {
		t.Errorf("%d Upgraded events, want at least %d", n, nodes-1)
	}
}

func TestPollsLatestAndRollsOut(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 3, nil)
	mirror := t.TempDir()
	if err := os.WriteFile(filepath.Join(mirror, "latest"), []byte("v2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(mirror, "v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	f.AsServiceAccount(manifest.Options{MirrorDirs: []string{mirror}}) // issue 21 item 6: as shipped
	for i := range 3 {
		f.Start(fmt.Sprintf("%s-n%d", f.NS, i))
	}
	f.Channel(v1.UpdateChannelSpec{URL: "file://" + mirror, Concurrency: 2, RebootDelay: fleettest.ZeroDelay(),
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS}}})
	ch := f.WaitFor("all nodes at v2", 2*time.Minute, fleettest.Done(3))
	if ch.Status.LatestVersion != "v2" || ch.Status.LastPolled == nil || ch.Status.Polling != nil || !fleettest.IsTrue(ch, v1.ConditionPolled) {
		t.Errorf("poll status: latest %q lastPolled %v polling %+v", ch.Status.LatestVersion, ch.Status.LastPolled, ch.Status.Polling)
	}
	f.AssertAllAt("v2")
}

func TestInvalidSpecIsReportedAndIgnored(t *testing.T) {
	f := newFleet(t, 2, nil)
	for i := range 2 {
		f.Start(fmt.Sprintf("%s-n%d", f.NS, i))
	}
	// The CRD's CEL rules refuse most bad specs at apply (ops/crds tests them);
	// these two pass the schema and only the agents can refuse them: a GitHub
	// owner longer than GitHub allows, and a poll interval under a second.
	owner := strings.Repeat("o", 40)
	f.Channel(v1.UpdateChannelSpec{URL: "github-releases://" + owner + "/os", Version: "v2",
		PollInterval: &metav1.Duration{Duration: 500 * time.Millisecond}})
	ch := f.WaitFor("Invalid", time.Minute, func(ch *v1.UpdateChannel) bool { return fleettest.IsTrue(ch, v1.ConditionInvalid) })
	c := meta.FindStatusCondition(ch.Status.Conditions, v1.ConditionInvalid)
	if c.Reason != plan.ReasonBadURL || !strings.Contains(c.Message, owner) {
		t.Errorf("Invalid condition = %+v", c)
	}
	if len(ch.Status.Updating) != 0 {
		t.Errorf("an invalid channel got slots: %+v", ch.Status.Updating)
	}
	ch.Spec.URL = "file:///mirror"
	if _, err := f.Ops.OpsV1().UpdateChannels(f.NS).Update(context.Background(), ch, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ch = f.WaitFor("Invalid poll interval", time.Minute, func(ch *v1.UpdateChannel) bool {
		c := meta.FindStatusCondition(ch.Status.Conditions, v1.ConditionInvalid)
		return c != nil && c.Reason == plan.ReasonBadDuration
	})
	if n := f.Events("Invalid", 2); n < 2 {
		t.Errorf("%d Invalid events, want one per bad spec (2)", n)
	}
	ch.Spec.PollInterval = nil
	if _, err := f.Ops.OpsV1().UpdateChannels(f.NS).Update(context.Background(), ch, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.WaitFor("valid", time.Minute, func(ch *v1.UpdateChannel) bool {
		c := meta.FindStatusCondition(ch.Status.Conditions, v1.ConditionInvalid)
		return c != nil && c.Status == metav1.ConditionFalse && ch.Status.ObservedGeneration == ch.Generation
	})
}

func TestFailedJobStopsTheRollout(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 3, func(o *Options) { o.Retry, o.Resync = plan.Retry{Base: time.Hour, Max: time.Hour}, resyncSoon })
	for i := range 3 {
		node := fmt.Sprintf("%s-n%d", f.NS, i)
		f.FailOn[node] = true
		f.Start(node)
	}
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(),
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS}}})
	ch := f.WaitFor("Degraded", time.Minute, func(ch *v1.UpdateChannel) bool { return fleettest.IsTrue(ch, v1.ConditionDegraded) })
	if len(ch.Status.Failed) != 1 || !strings.Contains(ch.Status.Failed[0].Reason, "sha256 mismatch") || ch.Status.Failed[0].Attempts != 1 {
		t.Fatalf("failed = %+v", ch.Status.Failed)
	}
	c := meta.FindStatusCondition(ch.Status.Conditions, v1.ConditionDegraded)
	if !strings.Contains(c.Message, ch.Status.Failed[0].Node) {
		t.Errorf("Degraded must say which node failed and why: %q", c.Message)
	}
	// Nothing else starts: watch every change through two resyncs of the fleet view.
	f.Holds("no slot after maxFailures", twoResyncs, func(c *v1.UpdateChannel) bool {
		return len(c.Status.Updating) == 0 && c.Status.Counts.UpToDate == 0
	})
	if n := f.Events("UpgradeFailed", 1); n < 1 {
		t.Error("no UpgradeFailed event")
	}
	for i := range 3 {
		if got := f.Current(fmt.Sprintf("%s-n%d", f.NS, i)); got != "v1" {
			t.Errorf("node %d: current %s, want v1", i, got)
		}
	}
}

func TestStaleSlotOfDeletedNodeIsRecovered(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 2, nil)
	alive, ghost := f.NS+"-n0", f.NS+"-n1"
	f.Install(alive, "v2")
	// The ghost node looks like a node with an agent at v1, but none runs there.
	if err := f.PatchNodeAnnotation(ghost, protocol.AnnotationRootfsVersion, "v1"); err != nil {
		t.Fatal(err)
	}
	f.Heartbeat(ghost) // its agent reported a moment ago
	f.Start(alive)
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2",
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS}}})
	f.WaitFor("the ghost holds a slot", time.Minute, func(ch *v1.UpdateChannel) bool {
		return plan.FindSlot(ch.Status, ghost) >= 0
	})
	if err := f.Kube.CoreV1().Nodes().Delete(context.Background(), ghost, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.WaitFor("the slot recovered", time.Minute, func(ch *v1.UpdateChannel) bool { return len(ch.Status.Updating) == 0 })
	// The failure entry of a node that is gone may be pruned at once; the
	// Event is the lasting record of why the slot was freed.
	if f.Events("SlotRecovered", 1) < 1 {
		t.Fatal("no SlotRecovered event")
	}
	l, err := f.Kube.CoreV1().Events(f.NS).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=SlotRecovered"})
	if err != nil {
		t.Fatal(err)
	}
	var why []string
	for _, e := range l.Items {
		why = append(why, e.Message)
	}
	if !strings.Contains(strings.Join(why, "\n"), ghost+" was deleted") {
		t.Errorf("SlotRecovered must say the node was deleted: %q", why)
	}
}

// TestPausedAndClosedWindowStartNothing: a paused channel, then one whose
// window is closed, starts no node through two resyncs of the fleet view;
// opening the window rolls the upgrade out.
func TestPausedAndClosedWindowStartNothing(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 2, func(o *Options) { o.Resync = resyncSoon })
	for i := range 2 {
		f.Start(fmt.Sprintf("%s-n%d", f.NS, i))
	}
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", Paused: true, RebootDelay: fleettest.ZeroDelay(),
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS}}})
	f.WaitFor("the fleet view to count the nodes and say Paused", time.Minute, func(ch *v1.UpdateChannel) bool {
		c := meta.FindStatusCondition(ch.Status.Conditions, v1.ConditionProgressing)
		return ch.Status.Counts.Nodes == 2 && c != nil && c.Reason == "Paused"
	})
	none := func(c *v1.UpdateChannel) bool { return len(c.Status.Updating) == 0 && c.Status.Counts.UpToDate == 0 }
	f.Holds("no slot while paused", twoResyncs, none)

	now := time.Now().UTC()
	hhmm := func(d time.Duration) string { return now.Add(d).Format("15:04") }
	f.Patch(fmt.Sprintf(`{"spec":{"paused":false,"window":{"start":%q,"end":%q}}}`, hhmm(2*time.Hour), hhmm(3*time.Hour)))
	f.WaitFor("the fleet view to see the unpaused spec", time.Minute, func(ch *v1.UpdateChannel) bool {
		return ch.Status.ObservedGeneration == ch.Generation
	})
	f.Holds("no slot outside the window", twoResyncs, none)

	f.Patch(fmt.Sprintf(`{"spec":{"window":{"start":%q,"end":%q}}}`, hhmm(-time.Hour), hhmm(time.Hour)))
	f.WaitFor("both nodes at v2 once the window is open", 2*time.Minute, fleettest.Done(2))
	f.AssertAllAt("v2")
}

// resyncSoon is the Resync of fleets whose tests watch that nothing
// happens through twoResyncs of the fleet view (the harness's is 5 s).
const (
	resyncSoon = 2 * time.Second
	twoResyncs = 2*resyncSoon + time.Second
)
