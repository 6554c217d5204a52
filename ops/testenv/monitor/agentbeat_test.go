package monitor

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	opsv1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/ops/testenv"
)

func TestRenewingSteadily(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	every := func(from, to, step int) []time.Time {
		var out []time.Time
		for s := from; s <= to; s += step {
			out = append(out, at(s))
		}
		return out
	}
	const ttl = 180 * time.Second // a 1 min heartbeat: judged silent past 90 s
	for _, tc := range []struct {
		name string
		b    AgentBeats
		at   time.Time
		want bool
	}{
		{"renewed every minute for long", AgentBeats{TTL: ttl, Seen: every(0, 600, 60)}, at(630), true},
		{"renewed every minute since it was created, within the TTL", AgentBeats{TTL: ttl, Seen: every(0, 60, 60)}, at(100), true},
		{"last renewed more than half the TTL before", AgentBeats{TTL: ttl, Seen: every(0, 300, 60)}, at(400), false},
		{"a silence of two minutes within the TTL before", AgentBeats{TTL: ttl, Seen: append(every(0, 240, 60), every(360, 420, 60)...)}, at(430), false},
		{"a silence older than the TTL is forgiven", AgentBeats{TTL: ttl, Seen: append(every(0, 120, 60), every(300, 600, 60)...)}, at(610), true},
		{"back from a long silence a moment ago", AgentBeats{TTL: ttl, Seen: []time.Time{at(0), at(600)}}, at(605), false},
		{"a Lease listed at start, never renewed", AgentBeats{TTL: ttl}, at(10), false},
		{"no TTL stated: not judged", AgentBeats{Seen: every(0, 600, 60)}, at(630), false},
		{"renewals after the blame do not count", AgentBeats{TTL: ttl, Seen: append(every(0, 120, 60), at(500))}, at(400), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, _ := renewingSteadily(tc.b, tc.at); got != tc.want {
				t.Errorf("renewingSteadily = %t, want %t", got, tc.want)
			}
		})
	}
}

func TestObserveBeat(t *testing.T) {
	node, secs := "n1", int32(180)
	lease := func(renew time.Time) *coordinationv1.Lease {
		rt := metav1.NewMicroTime(renew)
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: protocol.AgentLeaseName(node), Namespace: "ns"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &node, LeaseDurationSeconds: &secs, RenewTime: &rt}}
	}
	if got := heartbeatNode(lease(time.Now())); got != node {
		t.Fatalf("heartbeatNode = %q, want %q", got, node)
	}
	other := lease(time.Now())
	other.Name = "slipway-controller"
	if got := heartbeatNode(other); got != "" {
		t.Errorf("a Lease not named after its holder is no heartbeat: %q", got)
	}
	// The agent's clock 20 min behind: its renewTimes are in the past, and
	// one step back is still a renewal.
	t0, agent := time.Unix(5000, 0), time.Unix(5000, 0).Add(-20*time.Minute)
	b := observeBeat(AgentBeats{}, "Lease/ns/x", lease(agent), false, t0)
	b = observeBeat(b, "Lease/ns/x", lease(agent), false, t0.Add(time.Second))                   // the same content again: no renewal
	b = observeBeat(b, "Lease/ns/x", lease(agent.Add(time.Minute)), false, t0.Add(time.Minute))  // renewed
	b = observeBeat(b, "Lease/ns/x", lease(agent.Add(-time.Hour)), false, t0.Add(2*time.Minute)) // stepped back: renewed too
	if want := []time.Time{t0, t0.Add(time.Minute), t0.Add(2 * time.Minute)}; !slicesEqual(b.Seen, want) || b.TTL != 3*time.Minute {
		t.Errorf("seen %v ttl %s, want %v and 3m", b.Seen, b.TTL, want)
	}
	listed := observeBeat(AgentBeats{}, "Lease/ns/x", lease(agent), true, t0)
	if len(listed.Seen) != 0 {
		t.Errorf("a Lease from the initial list is no renewal: %v", listed.Seen)
	}
	if listed = observeBeat(listed, "Lease/ns/x", lease(agent.Add(time.Minute)), false, t0.Add(time.Minute)); len(listed.Seen) != 1 {
		t.Errorf("its first change is: %v", listed.Seen)
	}
}

func slicesEqual(a, b []time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

func TestReleasedForSilence(t *testing.T) {
	ev := func(reason, msg string, count int32) *corev1.Event {
		return &corev1.Event{Reason: reason, Message: msg, Count: count,
			InvolvedObject: corev1.ObjectReference{Kind: "UpdateChannel", Namespace: "ns", Name: "c"}}
	}
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		name     string
		prev, e  *corev1.Event
		wantNode string
	}{
		{"stopped reporting", nil, ev("SlotReleased", "the slipway agent of node n-1 stopped reporting 3m10s ago, before its reboot: slot released, not counted as a failure", 1), "n-1"},
		{"no agent", nil, ev("SlotReleased", "node n-2 has no slipway agent reporting: slot released, not counted as a failure", 1), "n-2"},
		{"released for NotReady", nil, ev("SlotReleased", "node n-3 turned NotReady 1m2s ago, before its reboot: slot released", 1), ""},
		{"another reason", nil, ev("SlotRecovered", "the slipway agent of node n-1 stopped reporting", 1), ""},
		{"seen again, counted again", ev("SlotReleased", "node n-2 has no slipway agent reporting", 1), ev("SlotReleased", "node n-2 has no slipway agent reporting", 2), "n-2"},
		{"the same count again", ev("SlotReleased", "node n-2 has no slipway agent reporting", 2), ev("SlotReleased", "node n-2 has no slipway agent reporting", 2), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, ok := releasedForSilence(tc.prev, tc.e, now)
			if ok != (tc.wantNode != "") || b.Node != tc.wantNode {
				t.Errorf("blame %+v %t, want node %q", b, ok, tc.wantNode)
			}
		})
	}
}

// heartbeat is a node's agent heartbeat Lease as the test writes it.
type heartbeat struct {
	w    *world
	node string
}

// beat creates the node's heartbeat Lease (TTL ttl) with renewTime at,
// written by a clock off by as much as the test likes.
func (w *world) beat(node string, ttl time.Duration, at time.Time) *heartbeat {
	w.t.Helper()
	rt, secs, name := metav1.NewMicroTime(at), int32(ttl.Seconds()), protocol.AgentLeaseName(node)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &node, LeaseDurationSeconds: &secs, RenewTime: &rt, AcquireTime: &rt}}
	if _, err := w.c.CoordinationV1().Leases("default").Create(w.ctx, l, metav1.CreateOptions{}); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() {
		_ = w.c.CoordinationV1().Leases("default").Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return &heartbeat{w: w, node: node}
}

// renew writes renewTime at.
func (h *heartbeat) renew(ctx context.Context, at time.Time) error {
	api := h.w.c.CoordinationV1().Leases("default")
	l, err := api.Get(ctx, protocol.AgentLeaseName(h.node), metav1.GetOptions{})
	if err != nil {
		return err
	}
	rt := metav1.NewMicroTime(at)
	l.Spec.RenewTime = &rt
	_, err = api.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

// skipNoAgentNow writes channel's status listing nodes skipped as NoAgent.
func (w *world) skipNoAgentNow(channel string, nodes ...string) {
	w.t.Helper()
	c, err := w.oc.OpsV1().UpdateChannels("default").Get(w.ctx, channel, metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	c.Status.Skipped = nil
	for _, n := range nodes {
		c.Status.Skipped = append(c.Status.Skipped, opsv1.SkippedNode{Node: n, Reason: skipNoAgent, Since: metav1.Now(),
			Message: "the slipway agent on node " + n + " last reported 20m0s ago (more than 8s): check its pod and logs"})
	}
	if _, err := w.oc.OpsV1().UpdateChannels("default").UpdateStatus(w.ctx, c, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

// released records the controller's SlotReleased Event for node.
func (w *world) released(channel, node, name string) {
	w.t.Helper()
	e := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Reason: "SlotReleased", Type: corev1.EventTypeWarning, Count: 1,
		Message:        "the slipway agent of node " + node + " stopped reporting 20m0s ago, before its reboot: slot released, not counted as a failure",
		InvolvedObject: corev1.ObjectReference{Kind: "UpdateChannel", Namespace: "default", Name: channel, APIVersion: "ops.slipway.dev/v1"}}
	if _, err := w.c.CoreV1().Events("default").Create(w.ctx, e, metav1.CreateOptions{}); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = w.c.CoreV1().Events("default").Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// TestPlantedNoAgentWhileRenewing: a node whose agent's clock is 20 min
// behind renews its heartbeat Lease every 300 ms (renewTimes 20 min in the
// past); a node whose agent created its Lease and went silent, and one
// whose Lease was there before the monitor looked, are skipped as NoAgent
// and have a slot released: nothing reported. The renewing node skipped
// as NoAgent is reported, and its slot released for a silent agent is
// reported again, with the Lease's history.
func TestPlantedNoAgentWhileRenewing(t *testing.T) {
	const ttl = 8 * time.Second // judged renewing steadily with no silence over 4 s
	behind := -20 * time.Minute
	c, err := kubernetes.NewForConfig(testenv.Need(t, env).Config)
	if err != nil {
		t.Fatal(err)
	}
	pre := &world{t: t, ctx: context.Background(), c: c}
	pre.beat("beat-0", ttl, time.Now()) // there before the monitor looks
	w := newWorld(t, Config{})
	w.channel("beat", 3, "beat")
	for _, n := range []string{"beat-0", "beat-1", "beat-2"} {
		w.node(n, map[string]string{"pool": "beat"})
	}
	live := w.beat("beat-1", ttl, time.Now().Add(behind))
	ctx, stop := context.WithCancel(w.ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if err := live.renew(ctx, time.Now().Add(behind)); err != nil && ctx.Err() == nil {
					t.Errorf("renew beat-1's heartbeat: %v", err)
				}
			}
		}
	}()
	t.Cleanup(func() { stop(); wg.Wait() })
	w.beat("beat-2", ttl, time.Now())
	w.skipNoAgentNow("beat") // the channel's first version with skips seen: the next ones are new
	time.Sleep(ttl/2 + time.Second)
	w.skipNoAgentNow("beat", "beat-0", "beat-2")
	w.released("beat", "beat-2", "beat-released-2")
	w.released("beat", "beat-0", "beat-released-0")
	w.caughtUpLease("beat-2")
	time.Sleep(300 * time.Millisecond)
	w.quiet("a silent agent and one never seen renewing skipped and released")
	w.skipNoAgentNow("beat", "beat-0", "beat-1", "beat-2")
	v := w.expect(InvNoAgentWhileRenewing)
	if !strings.Contains(v.Message, "node beat-1 blamed on a silent agent: channel default/beat skipped it as NoAgent") ||
		!strings.Contains(v.Message, "steadily over the TTL of 8s") {
		t.Errorf("message: %s", v.Message)
	}
	if h := v.History["Lease/default/"+protocol.AgentLeaseName("beat-1")]; len(h) < 3 {
		t.Errorf("the violation must carry the Lease's renewals: %v", v.History)
	}
	w.released("beat", "beat-1", "beat-released-1")
	deadline := time.Now().Add(10 * time.Second)
	for {
		var found bool
		for _, v := range w.m.Violations() {
			found = found || v.Invariant == InvNoAgentWhileRenewing && strings.Contains(v.Message, "released its slot (Event SlotReleased")
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s violation for the released slot; recorded: %v", InvNoAgentWhileRenewing, w.m.Violations())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, v := range w.m.Violations() {
		if strings.Contains(v.Message, "beat-0") || strings.Contains(v.Message, "beat-2") {
			t.Errorf("a silent agent reported: %s", v.Message)
		}
	}
}

// caughtUpLease waits until the monitor has observed node's heartbeat
// Lease at its latest version.
func (w *world) caughtUpLease(node string) {
	w.t.Helper()
	key := "Lease/default/" + protocol.AgentLeaseName(node)
	l, err := w.c.CoordinationV1().Leases("default").Get(w.ctx, protocol.AgentLeaseName(node), metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if h := w.m.History(key); len(h) > 0 && h[len(h)-1].ResourceVersion == l.ResourceVersion {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	w.t.Fatalf("the monitor never observed %s at %s", key, l.ResourceVersion)
}
