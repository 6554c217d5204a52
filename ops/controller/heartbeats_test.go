package controller

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

func TestNextSeen(t *testing.T) {
	t0 := time.Unix(10_000, 0)
	renew := t0.Add(-20 * time.Minute) // the agent's clock, 20 min behind
	for _, tc := range []struct {
		name      string
		prev      heartbeatSeen
		ok        bool
		renew     time.Time
		wantFirst time.Time
	}{
		{"a first read counts as just seen, however old its renewTime", heartbeatSeen{}, false, renew, t0},
		{"a first read of a renewTime in the future too", heartbeatSeen{}, false, t0.Add(20 * time.Minute), t0},
		{"the same renewTime: silent since it was first read", heartbeatSeen{renew: renew, first: t0.Add(-time.Minute)}, true, renew, t0.Add(-time.Minute)},
		{"a later renewTime: renewed", heartbeatSeen{renew: renew, first: t0.Add(-time.Minute)}, true, renew.Add(time.Second), t0},
		{"an earlier renewTime (its clock stepped back): renewed", heartbeatSeen{renew: renew, first: t0.Add(-time.Minute)}, true, renew.Add(-time.Hour), t0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := nextSeen(tc.prev, tc.ok, tc.renew, t0)
			if !got.first.Equal(tc.wantFirst) || !got.renew.Equal(tc.renew) {
				t.Errorf("nextSeen = %+v, want first read at %s of %s", got, tc.wantFirst, tc.renew)
			}
		})
	}
}

// TestHeartbeatsRead: the silence grows while the renewTime stays, and
// starts again at a change; reads from parallel checks are safe (-race).
func TestHeartbeatsRead(t *testing.T) {
	var h heartbeats
	t0 := time.Unix(10_000, 0)
	renew := t0.Add(time.Hour) // the agent's clock an hour ahead: no matter
	if d := h.read("n", renew, t0); d != 0 {
		t.Errorf("first read: silent %s, want 0", d)
	}
	if d := h.read("n", renew, t0.Add(5*time.Second)); d != 5*time.Second {
		t.Errorf("same renewTime 5 s later: silent %s, want 5s", d)
	}
	if d := h.read("n", renew.Add(-time.Second), t0.Add(7*time.Second)); d != 0 {
		t.Errorf("renewed: silent %s, want 0", d)
	}
	h.forget("n")
	if d := h.read("n", renew.Add(-time.Second), t0.Add(9*time.Second)); d != 0 {
		t.Errorf("read after forget: silent %s, want 0", d)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 100 {
				h.read("m", renew.Add(time.Duration(i)), t0.Add(time.Duration(j)))
				if j%10 == 0 {
					h.forget("m")
				}
			}
		}()
	}
	wg.Wait()
}

// skewedFleet is a fleet whose controller judges heartbeats with a 2 s
// interval (a TTL of 6 s) while the agents renew theirs only once an hour
// (at each start): the test writes the heartbeats it wants in their place.
// The agents' options are the controller's with no identity (harness_test.go).
func skewedFleet(t *testing.T, nodes int) *fleet {
	return newFleet(t, nodes, func(o *Options) {
		o.HeartbeatInterval = 2 * time.Second
		if o.Identity == "" { // the agents'
			o.HeartbeatInterval = time.Hour
		}
	})
}

// writeHeartbeat sets node's heartbeat Lease (held by node) to renewTime
// at, with a busy agent's duration (three 2 s intervals).
func writeHeartbeat(ctx context.Context, f *fleet, node string, at time.Time) error {
	return writeHeartbeatFor(ctx, f, node, at, 6)
}

// writeHeartbeatFor is writeHeartbeat declaring a duration of secs seconds.
func writeHeartbeatFor(ctx context.Context, f *fleet, node string, at time.Time, secs int32) error {
	api := f.Kube.CoordinationV1().Leases(f.NS)
	rt := metav1.NewMicroTime(at)
	l, err := api.Get(ctx, protocol.AgentLeaseName(node), metav1.GetOptions{})
	if err != nil {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: protocol.AgentLeaseName(node), Namespace: f.NS},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &node, LeaseDurationSeconds: &secs, RenewTime: &rt}}
		_, err = api.Create(ctx, l, metav1.CreateOptions{})
		return err
	}
	l.Spec.RenewTime = &rt
	_, err = api.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

// TestAgentClockBehindStillUpgrades: a node whose agent renews its
// heartbeat every interval, with renewTimes 20 min in the past (its clock
// behind the controller's), takes its slot and upgrades: it is never
// skipped as NoAgent. Judged by the renewTime against the controller's
// clock it looked 20 min silent.
func TestAgentClockBehindStillUpgrades(t *testing.T) {
	t.Parallel()
	f := skewedFleet(t, 1)
	node := f.NS + "-n0"
	f.Start(node)
	f.AgentsUp(node) // its own heartbeat, once
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			if err := writeHeartbeat(ctx, f, node, time.Now().Add(-20*time.Minute)); err != nil && ctx.Err() == nil {
				t.Logf("renew %s's heartbeat: %v (again at the next interval)", node, err)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	deadline := time.Now().Add(time.Minute)
	for {
		l, err := f.Kube.CoordinationV1().Leases(f.NS).Get(ctx, protocol.AgentLeaseName(node), metav1.GetOptions{})
		if err == nil && l.Spec.RenewTime != nil && time.Since(l.Spec.RenewTime.Time) > 10*time.Minute {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the heartbeat 20 min in the past never written: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(), NodeSelector: f.Selector()})
	f.WaitFor(node+" at v2 with no slot, never skipped as NoAgent", 2*time.Minute, func(ch *v1.UpdateChannel) bool {
		if skippedAs(ch, node, plan.SkipNoAgent) {
			t.Fatalf("%s skipped as NoAgent while its agent renews its heartbeat: %+v", node, ch.Status.Skipped)
		}
		return ch.Status.Counts.UpToDate == 1 && len(ch.Status.Updating) == 0
	})
	if got := f.Current(node); got != "v2" {
		t.Errorf("%s: current %s, want v2", node, got)
	}
}

// TestAgentClockAheadGoneIsSkipped: a node with no agent running whose
// heartbeat Lease carries a renewTime 20 min in the future (its agent's
// clock was ahead when it last reported) and is never renewed: the
// controller first counts it as just seen, and after a TTL of watching
// its slot is released as abandoned and the node skipped as NoAgent.
// Judged by the renewTime against the controller's clock it looked alive
// for 20 min more, holding its slot.
func TestAgentClockAheadGoneIsSkipped(t *testing.T) {
	t.Parallel()
	f := skewedFleet(t, 1)
	ghost := f.NS + "-n0"
	// It looks like a node whose agent once reported v1; none runs there.
	if err := f.PatchNodeAnnotation(ghost, protocol.AnnotationRootfsVersion, "v1"); err != nil {
		t.Fatal(err)
	}
	if err := writeHeartbeat(context.Background(), f, ghost, time.Now().Add(20*time.Minute)); err != nil {
		t.Fatal(err)
	}
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(), NodeSelector: f.Selector()})
	ch := f.WaitFor(ghost+" skipped as NoAgent with no slot", 2*time.Minute, func(ch *v1.UpdateChannel) bool {
		return skippedAs(ch, ghost, plan.SkipNoAgent) && len(ch.Status.Updating) == 0
	})
	for _, s := range ch.Status.Skipped {
		if s.Node == ghost && !strings.Contains(s.Message, "has not renewed its heartbeat for") {
			t.Errorf("the skip must say how long the controller saw it silent: %q", s.Message)
		}
	}
	if len(ch.Status.Failed) != 0 {
		t.Errorf("a silent agent is no failed upgrade: %+v", ch.Status.Failed)
	}
}

// TestIdleLeaseCountsItsDeclaredDuration: a node whose Lease declares an
// idle agent's duration (30 s: three of the five-interval renewals at a
// 2 s interval) keeps its slot while silent for longer than three busy
// intervals (6 s), and loses it, as abandoned, once silent for longer
// than it declared. Judged by the busy duration alone, an idle agent
// would be skipped as NoAgent between two of its renewals.
func TestIdleLeaseCountsItsDeclaredDuration(t *testing.T) {
	t.Parallel()
	f := skewedFleet(t, 1)
	ghost := f.NS + "-n0"
	// It looks like a node whose idle agent once reported v1; none runs there.
	if err := f.PatchNodeAnnotation(ghost, protocol.AnnotationRootfsVersion, "v1"); err != nil {
		t.Fatal(err)
	}
	if err := writeHeartbeatFor(context.Background(), f, ghost, time.Now(), 30); err != nil {
		t.Fatal(err)
	}
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(), NodeSelector: f.Selector()})
	f.WaitFor(ghost+" in a slot", time.Minute, func(ch *v1.UpdateChannel) bool { return plan.FindSlot(ch.Status, ghost) >= 0 })
	time.Sleep(15 * time.Second) // silent past 6 s, within 30 s
	if ch := f.Get(); plan.FindSlot(ch.Status, ghost) < 0 {
		t.Fatalf("the slot of %s released within the 30 s its Lease declares: skipped %+v", ghost, ch.Status.Skipped)
	}
	f.WaitFor(ghost+" released and skipped as NoAgent", 2*time.Minute, func(ch *v1.UpdateChannel) bool {
		return skippedAs(ch, ghost, plan.SkipNoAgent) && plan.FindSlot(ch.Status, ghost) < 0
	})
}
