package agent

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

func zeroDelay() *metav1.Duration { return &metav1.Duration{} }

func isTrue(ch *v1.UpdateChannel, t string) bool {
	return meta.IsStatusConditionTrue(ch.Status.Conditions, t)
}

func done(n int) func(*v1.UpdateChannel) bool {
	return func(ch *v1.UpdateChannel) bool {
		return ch.Status.Counts.UpToDate == n && ch.Status.Counts.Nodes == n && len(ch.Status.Updating) == 0 && isTrue(ch, v1.ConditionComplete)
	}
}

// watcher records, from watches, the most slots held and nodes cordoned at any instant.
type watcher struct {
	mu          sync.Mutex
	maxSlots    int
	maxCordoned int
	cordoned    map[string]bool
	bad         []string
}

func (f *fleet) watch(ctx context.Context) *watcher {
	w := &watcher{cordoned: map[string]bool{}}
	cw, err := f.ops.OpsV1().UpdateChannels(f.ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	nw, err := f.kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: "fleet=" + f.ns})
	if err != nil {
		f.t.Fatal(err)
	}
	go func() {
		for ev := range cw.ResultChan() {
			ch, ok := ev.Object.(*v1.UpdateChannel)
			if !ok {
				continue
			}
			w.mu.Lock()
			w.maxSlots = max(w.maxSlots, len(ch.Status.Updating))
			seen := map[string]bool{}
			for _, s := range ch.Status.Updating {
				if seen[s.Node] || !strings.HasPrefix(s.Node, f.ns+"-n") {
					w.bad = append(w.bad, fmt.Sprintf("bad slot list %+v", ch.Status.Updating))
				}
				seen[s.Node] = true
			}
			w.mu.Unlock()
		}
	}()
	go func() {
		for ev := range nw.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			w.mu.Lock()
			w.cordoned[n.Name] = n.Spec.Unschedulable && ev.Type != watch.Deleted
			c := 0
			for _, on := range w.cordoned {
				if on {
					c++
				}
			}
			w.maxCordoned = max(w.maxCordoned, c)
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *watcher) check(t *testing.T, concurrency int) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("most slots held at once: %d, most nodes cordoned at once: %d (concurrency %d)", w.maxSlots, w.maxCordoned, concurrency)
	if w.maxSlots > concurrency || w.maxCordoned > concurrency {
		t.Errorf("over concurrency: %d slots, %d cordoned, concurrency %d", w.maxSlots, w.maxCordoned, concurrency)
	}
	if w.maxSlots == 0 {
		t.Error("the watch never saw a slot: the test did not observe the rollout")
	}
	for _, b := range w.bad {
		t.Error(b)
	}
}

func (f *fleet) assertAllAt(version string) {
	f.t.Helper()
	nodes, err := f.kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: "fleet=" + f.ns})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if got := f.current(n.Name); got != version {
			f.t.Errorf("node %s: current is %s, want %s", n.Name, got, version)
		}
		if n.Spec.Unschedulable || n.Annotations[drain.AnnotationCordonedBy] != "" {
			f.t.Errorf("node %s left cordoned", n.Name)
		}
		if n.Labels[protocol.LabelRootfsVersion] != version {
			f.t.Errorf("node %s: label %s=%q, want %s", n.Name, protocol.LabelRootfsVersion, n.Labels[protocol.LabelRootfsVersion], version)
		}
	}
}

// events waits (watching, up to 30 s) until at least want events of reason
// were recorded, and returns how many there are.
func (f *fleet) events(reason string, want int) int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := metav1.ListOptions{FieldSelector: "reason=" + reason}
	for {
		l, err := f.kube.CoreV1().Events(f.ns).List(ctx, opts)
		if err != nil {
			return 0
		}
		n := 0
		for _, e := range l.Items {
			n += int(max(e.Count, 1))
		}
		if n >= want {
			return n
		}
		opts.ResourceVersion = l.ResourceVersion
		w, err := f.kube.CoreV1().Events(f.ns).Watch(ctx, opts)
		if err != nil {
			return n
		}
		select {
		case <-w.ResultChan():
		case <-ctx.Done():
		}
		w.Stop()
		if ctx.Err() != nil {
			return n
		}
		opts.ResourceVersion = ""
	}
}

// TestRacingAgentsNeverExceedConcurrency: 20 agents race for 3 slots while
// agents are killed and restarted at random moments.
func TestRacingAgentsNeverExceedConcurrency(t *testing.T) {
	t.Parallel()
	const nodes, concurrency = 20, 3
	f := newFleet(t, nodes, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := f.watch(ctx)
	for i := range nodes {
		f.start(fmt.Sprintf("%s-n%d", f.ns, i))
	}
	f.channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", Concurrency: concurrency, RebootDelay: zeroDelay(),
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.ns}}})
	go func() { // kill and restart agents mid-rollout
		for i := 0; i < 15 && ctx.Err() == nil; i++ {
			node := fmt.Sprintf("%s-n%d", f.ns, rand.IntN(nodes))
			f.restart(node, nil)
			select {
			case <-ctx.Done():
			case <-time.After(400 * time.Millisecond):
			}
		}
	}()
	f.waitFor("all 20 nodes at v2", 3*time.Minute, done(nodes))
	cancel()
	w.check(t, concurrency)
	f.assertAllAt("v2")
	// Events are best effort: an agent killed in the milliseconds between
	// freeing its slot and posting its Upgraded Event loses that Event (its
	// node is upgraded all the same, as assertAllAt checked). With 15
	// random kills, one such loss is tolerated; more means Events go missing.
	if n := f.events("Upgraded", nodes-1); n < nodes-1 {
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
	f.asServiceAccount(manifest.Options{MirrorDirs: []string{mirror}}) // issue 21 item 6: as shipped
	for i := range 3 {
		f.start(fmt.Sprintf("%s-n%d", f.ns, i))
	}
	f.channel(v1.UpdateChannelSpec{URL: "file://" + mirror, Concurrency: 2, RebootDelay: zeroDelay(),
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.ns}}})
	ch := f.waitFor("all nodes at v2", 2*time.Minute, done(3))
	if ch.Status.LatestVersion != "v2" || ch.Status.LastPolled == nil || ch.Status.Polling != nil || !isTrue(ch, v1.ConditionPolled) {
		t.Errorf("poll status: latest %q lastPolled %v polling %+v", ch.Status.LatestVersion, ch.Status.LastPolled, ch.Status.Polling)
	}
	f.assertAllAt("v2")
}

func TestInvalidSpecIsReportedAndIgnored(t *testing.T) {
	f := newFleet(t, 2, nil)
	for i := range 2 {
		f.start(fmt.Sprintf("%s-n%d", f.ns, i))
	}
	// The CRD's CEL rules refuse most bad specs at apply (ops/crds tests them);
	// these two pass the schema and only the agents can refuse them: a GitHub
	// owner longer than GitHub allows, and a poll interval under a second.
	owner := strings.Repeat("o", 40)
	f.channel(v1.UpdateChannelSpec{URL: "github-releases://" + owner + "/os", Version: "v2",
		PollInterval: &metav1.Duration{Duration: 500 * time.Millisecond}})
	ch := f.waitFor("Invalid", time.Minute, func(ch *v1.UpdateChannel) bool { return isTrue(ch, v1.ConditionInvalid) })
	c := meta.FindStatusCondition(ch.Status.Conditions, v1.ConditionInvalid)
	if c.Reason != plan.ReasonBadURL || !strings.Contains(c.Message, owner) {
		t.Errorf("Invalid condition = %+v", c)
	}
	if len(ch.Status.Updating) != 0 {
		t.Errorf("an invalid channel got slots: %+v", ch.Status.Updating)
	}
	ch.Spec.URL = "file:///mirror"
	if _, err := f.ops.OpsV1().UpdateChannels(f.ns).Update(context.Background(), ch, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ch = f.waitFor("Invalid poll interval", time.Minute, func(ch *v1.UpdateChannel) bool {
		c := meta.FindStatusCondition(ch.Status.Conditions, v1.ConditionInvalid)
		return c != nil && c.Reason == plan.ReasonBadDuration
	})
	if n := f.events("Invalid", 2); n < 2 {
		t.Errorf("%d Invalid events, want one per bad spec (2)", n)
	}
	ch.Spec.PollInterval = nil
	if _, err := f.ops.OpsV1().UpdateChannels(f.ns).Update(context.Background(), ch, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor("valid", time.Minute, func(ch *v1.UpdateChannel) bool {
		c := meta.FindStatusCondition(ch.Status.Conditions, v1.ConditionInvalid)
		return c != nil && c.Status == metav1.ConditionFalse && ch.Status.ObservedGeneration == ch.Generation
	})
}

func TestFailedJobStopsTheRollout(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 3, func(o *Options) { o.Retry, o.Resync = plan.Retry{Base: time.Hour, Max: time.Hour}, resyncSoon })
	for i := range 3 {
		node := fmt.Sprintf("%s-n%d", f.ns, i)
		f.failOn[node] = true
		f.start(node)
	}
	f.channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: zeroDelay(),
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.ns}}})
	ch := f.waitFor("Degraded", time.Minute, func(ch *v1.UpdateChannel) bool { return isTrue(ch, v1.ConditionDegraded) })
	if len(ch.Status.Failed) != 1 || !strings.Contains(ch.Status.Failed[0].Reason, "sha256 mismatch") || ch.Status.Failed[0].Attempts != 1 {
		t.Fatalf("failed = %+v", ch.Status.Failed)
	}
	c := meta.FindStatusCondition(ch.Status.Conditions, v1.ConditionDegraded)
	if !strings.Contains(c.Message, ch.Status.Failed[0].Node) {
		t.Errorf("Degraded must say which node failed and why: %q", c.Message)
	}
	// Nothing else starts: watch every change through two resyncs of the fleet view.
	f.holds("no slot after maxFailures", twoResyncs, func(c *v1.UpdateChannel) bool {
		return len(c.Status.Updating) == 0 && c.Status.Counts.UpToDate == 0
	})
	if n := f.events("UpgradeFailed", 1); n < 1 {
		t.Error("no UpgradeFailed event")
	}
	for i := range 3 {
		if got := f.current(fmt.Sprintf("%s-n%d", f.ns, i)); got != "v1" {
			t.Errorf("node %d: current %s, want v1", i, got)
		}
	}
}

func TestStaleSlotOfDeletedNodeIsRecovered(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 2, nil)
	alive, ghost := f.ns+"-n0", f.ns+"-n1"
	f.install(alive, "v2")
	// The ghost node looks like a node with an agent at v1, but none runs there.
	if err := f.patchNodeAnnotation(ghost, protocol.AnnotationRootfsVersion, "v1"); err != nil {
		t.Fatal(err)
	}
	f.heartbeat(ghost) // its agent reported a moment ago
	f.start(alive)
	f.channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2",
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.ns}}})
	f.waitFor("the ghost holds a slot", time.Minute, func(ch *v1.UpdateChannel) bool {
		return plan.FindSlot(ch.Status, ghost) >= 0
	})
	if err := f.kube.CoreV1().Nodes().Delete(context.Background(), ghost, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor("the slot recovered", time.Minute, func(ch *v1.UpdateChannel) bool { return len(ch.Status.Updating) == 0 })
	// The failure entry of a node that is gone may be pruned at once; the
	// Event is the lasting record of why the slot was freed.
	if f.events("SlotRecovered", 1) < 1 {
		t.Fatal("no SlotRecovered event")
	}
	l, err := f.kube.CoreV1().Events(f.ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=SlotRecovered"})
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

func (f *fleet) patchNodeAnnotation(node, k, v string) error {
	data := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, k, v)
	_, err := f.kube.CoreV1().Nodes().Patch(context.Background(), node, "application/merge-patch+json", []byte(data), metav1.PatchOptions{})
	return err
}

// TestPausedAndClosedWindowStartNothing: a paused channel, then one whose
// window is closed, starts no node through two resyncs of the fleet view;
// opening the window rolls the upgrade out.
func TestPausedAndClosedWindowStartNothing(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 2, func(o *Options) { o.Resync = resyncSoon })
	for i := range 2 {
		f.start(fmt.Sprintf("%s-n%d", f.ns, i))
	}
	f.channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", Paused: true, RebootDelay: zeroDelay(),
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.ns}}})
	f.waitFor("the fleet view to count the nodes and say Paused", time.Minute, func(ch *v1.UpdateChannel) bool {
		c := meta.FindStatusCondition(ch.Status.Conditions, v1.ConditionProgressing)
		return ch.Status.Counts.Nodes == 2 && c != nil && c.Reason == "Paused"
	})
	none := func(c *v1.UpdateChannel) bool { return len(c.Status.Updating) == 0 && c.Status.Counts.UpToDate == 0 }
	f.holds("no slot while paused", twoResyncs, none)

	now := time.Now().UTC()
	hhmm := func(d time.Duration) string { return now.Add(d).Format("15:04") }
	f.patch(fmt.Sprintf(`{"spec":{"paused":false,"window":{"start":%q,"end":%q}}}`, hhmm(2*time.Hour), hhmm(3*time.Hour)))
	f.waitFor("the fleet view to see the unpaused spec", time.Minute, func(ch *v1.UpdateChannel) bool {
		return ch.Status.ObservedGeneration == ch.Generation
	})
	f.holds("no slot outside the window", twoResyncs, none)

	f.patch(fmt.Sprintf(`{"spec":{"window":{"start":%q,"end":%q}}}`, hhmm(-time.Hour), hhmm(time.Hour)))
	f.waitFor("both nodes at v2 once the window is open", 2*time.Minute, done(2))
	f.assertAllAt("v2")
}

// resyncSoon is the Resync of fleets whose tests watch that nothing
// happens through twoResyncs of the fleet view (the harness's is 5 s).
const (
	resyncSoon = 2 * time.Second
	twoResyncs = 2*resyncSoon + time.Second
)

func (f *fleet) patch(mergePatch string) {
	f.t.Helper()
	_, err := f.ops.OpsV1().UpdateChannels(f.ns).Patch(context.Background(), "default", "application/merge-patch+json", []byte(mergePatch), metav1.PatchOptions{})
	if err != nil {
		f.t.Fatalf("patch the channel with %s: %v", mergePatch, err)
	}
}
