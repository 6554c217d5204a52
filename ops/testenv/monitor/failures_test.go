package monitor

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	opsv1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/protocol"
)

func TestSlotEndsAndGrants(t *testing.T) {
	since := metav1.NewTime(time.Unix(1000, 0))
	a := opsv1.Slot{Node: "a", Version: "v2", Attempt: 1, Since: since}
	b := opsv1.Slot{Node: "b", Version: "v2", Attempt: 1, Since: since}
	ch := func(st opsv1.UpdateChannelStatus, maxF int) *opsv1.UpdateChannel {
		return &opsv1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", ResourceVersion: "7"},
			Spec: opsv1.UpdateChannelSpec{MaxFailures: maxF}, Status: st}
	}
	for _, tc := range []struct {
		name    string
		prev    []opsv1.Slot
		st      opsv1.UpdateChannelStatus
		counted []bool
	}{
		{"a slot kept (its phase moved on)", []opsv1.Slot{a}, opsv1.UpdateChannelStatus{Updating: []opsv1.Slot{{Node: "a", Version: "v2", Attempt: 1, Since: since, Phase: "Draining"}}}, nil},
		{"a slot ended counted", []opsv1.Slot{a}, opsv1.UpdateChannelStatus{Failed: []opsv1.Failure{{Node: "a", Version: "v2", Reason: "r", Attempts: 1}}}, []bool{true}},
		{"a slot ended with no failure", []opsv1.Slot{a, b}, opsv1.UpdateChannelStatus{Updating: []opsv1.Slot{b}}, []bool{false}},
		{"an older attempt's failure does not count it", []opsv1.Slot{{Node: "a", Version: "v2", Attempt: 2, Since: since}},
			opsv1.UpdateChannelStatus{Failed: []opsv1.Failure{{Node: "a", Version: "v2", Reason: "r", Attempts: 1}}}, []bool{false}},
		{"a failure with no reason does not count it", []opsv1.Slot{a}, opsv1.UpdateChannelStatus{Failed: []opsv1.Failure{{Node: "a", Version: "v2", Attempts: 1}}}, []bool{false}},
		{"another version's failure does not count it", []opsv1.Slot{a}, opsv1.UpdateChannelStatus{Failed: []opsv1.Failure{{Node: "a", Version: "v3", Reason: "r", Attempts: 1}}}, []bool{false}},
		{"a slot replaced by its node's next attempt", []opsv1.Slot{a}, opsv1.UpdateChannelStatus{Updating: []opsv1.Slot{{Node: "a", Version: "v2", Attempt: 2, Since: metav1.NewTime(time.Unix(1100, 0))}}}, []bool{false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := slotEnds(tc.prev, ch(tc.st, 0), time.Unix(2000, 0))
			if len(got) != len(tc.counted) {
				t.Fatalf("ends %+v, want %d", got, len(tc.counted))
			}
			for i, e := range got {
				if e.Counted != tc.counted[i] || e.RV != "7" || e.Channel != "ns/c" {
					t.Errorf("end %d: %+v, want counted %t", i, e, tc.counted[i])
				}
			}
		})
	}
	failed := []opsv1.Failure{{Node: "a", Version: "v2", Reason: "r"}, {Node: "x", Version: "v2", Reason: "r"}, {Node: "y", Version: "v1", Reason: "r"}}
	gs := failureGrants([]opsv1.Slot{b}, ch(opsv1.UpdateChannelStatus{Failed: failed, Skipped: []opsv1.SkippedNode{{Node: "x", Reason: "NotReady"}},
		Updating: []opsv1.Slot{b, {Node: "a", Version: "v2", Attempt: 2}, {Node: "c", Version: "v2"}, {Node: "d", Version: "v1", Rollback: true}}}, 0), time.Unix(2000, 0))
	if len(gs) != 2 || gs[0].Slot.Node != "a" || !gs[0].Retry || gs[1].Slot.Node != "c" || gs[1].Retry {
		t.Fatalf("grants %+v, want a (a retry) and c (new): b was held, d is a rollback", gs)
	}
	if g := gs[1]; g.Max != opsv1.DefaultMaxFailures || strings.Join(g.Failures, ",") != "a" {
		t.Errorf("grant c counts %v of max %d, want [a] (x is skipped, y of another version) of %d", g.Failures, g.Max, opsv1.DefaultMaxFailures)
	}
}

func TestFailureCountedRule(t *testing.T) {
	t0 := time.Unix(1000, 0)
	since := metav1.NewTime(time.Unix(900, 0))
	sl := opsv1.Slot{Node: "a", Version: "v2", Attempt: 1, Since: since, Phase: "Upgrading"}
	end := func(counted bool) []SlotEnd {
		return []SlotEnd{{Channel: "ns/c", UID: "u", Slot: sl, At: t0, RV: "100", Counted: counted}}
	}
	report := func(outcome, rv string) map[string]map[types.UID]SlotReportObs {
		return map[string]map[types.UID]SlotReportObs{"a": {"u": {RV: rv, Report: protocol.Report{Version: "v2", Attempt: 1, Since: since, Outcome: outcome, Reason: "job failed"}}}}
	}
	otherSlot := map[string]map[types.UID]SlotReportObs{"a": {"u": {RV: "90", Report: protocol.Report{Version: "v2", Attempt: 2, Since: since, Outcome: protocol.OutcomeFailed}}}}
	nodes := func(v string) map[string]NodeObs { return map[string]NodeObs{"a": {Name: "a", Version: v}} }
	released := []SlotReleasedEvent{{Channel: "ns/c", Message: "node a turned NotReady 40s ago, before its reboot: slot released", At: t0.Add(time.Second)}}
	later := t0.Add(time.Minute)
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "p"}}
	drop := func(target string) []FailureDrop {
		return []FailureDrop{{Channel: "ns/c", Failure: opsv1.Failure{Node: "a", Version: "v2", Reason: "job failed", Attempts: 1}, At: t0, Target: target}}
	}
	unselected := drop("v2")
	unselected[0].Selector = sel
	for _, tc := range []struct {
		name string
		s    State
		want string
	}{
		{"counted", State{Now: later, SlotEnds: end(true), SlotReports: report(protocol.OutcomeFailed, "90")}, ""},
		{"reported Failed, not counted", State{Now: later, SlotEnds: end(false), SlotReports: report(protocol.OutcomeFailed, "90"), Nodes: nodes("v1")}, "though the node had reported it Failed (job failed)"},
		{"reported Failed, not counted, within the grace", State{Now: t0, SlotEnds: end(false), SlotReports: report(protocol.OutcomeFailed, "90"), Nodes: nodes("v1")}, ""},
		{"reported Failed, every slot freed by an invalid spec (an Event)", State{Now: later, SlotEnds: end(false), SlotReports: report(protocol.OutcomeFailed, "90"), Nodes: nodes("v1"),
			SlotReleases: []SlotReleasedEvent{{Channel: "ns/c", Message: "freed the slot of node a (at v2, phase Upgrading): the spec is invalid (x); its agent uncordons it", At: t0}}}, ""},
		{"reported Failed after the end, not yet judged", State{Now: t0, SlotEnds: end(false), SlotReports: report(protocol.OutcomeFailed, "110"), Nodes: nodes("v1")}, ""},
		{"reported Failed after the end, past the grace", State{Now: later, SlotEnds: end(false), SlotReports: report(protocol.OutcomeFailed, "110"), Nodes: nodes("v1")}, "with no failure counted"},
		{"succeeded", State{Now: later, SlotEnds: end(false), SlotReports: report(protocol.OutcomeSucceeded, "90"), Nodes: nodes("v1")}, ""},
		{"given back (a window)", State{Now: later, SlotEnds: end(false), SlotReports: report(protocol.OutcomeReleased, "90"), Nodes: nodes("v1")}, ""},
		{"at the slot's version", State{Now: later, SlotEnds: end(false), Nodes: nodes("v2")}, ""},
		{"released by the controller with an Event", State{Now: later, SlotEnds: end(false), Nodes: nodes("v1"), SlotReleases: released}, ""},
		{"an Event of another node", State{Now: later, SlotEnds: end(false), Nodes: nodes("v1"),
			SlotReleases: []SlotReleasedEvent{{Channel: "ns/c", Message: "node ab turned NotReady", At: t0}}}, "no SlotReleased Event"},
		{"an Event long before", State{Now: later, SlotEnds: end(false), Nodes: nodes("v1"),
			SlotReleases: []SlotReleasedEvent{{Channel: "ns/c", Message: released[0].Message, At: t0.Add(-time.Minute)}}}, "no SlotReleased Event"},
		{"silent, within the grace", State{Now: t0.Add(time.Second), SlotEnds: end(false), Nodes: nodes("v1")}, ""},
		{"silent, past the grace", State{Now: later, SlotEnds: end(false), Nodes: nodes("v1")}, "no report of the node ending it"},
		{"a report of another attempt", State{Now: later, SlotEnds: end(false), SlotReports: otherSlot, Nodes: nodes("v1")}, "no report of the node ending it"},
		{"a failure dropped, the node behind, past the grace", State{Now: later, FailureDrops: drop("v2"), Nodes: nodes("v1")},
			"channel ns/c dropped node a's failure at v2 (job failed) from status.failed, though v2 is still its target, the node still selected and it runs \"v1\", not v2"},
		{"a failure dropped, within the grace", State{Now: t0.Add(time.Second), FailureDrops: drop("v2"), Nodes: nodes("v1")}, ""},
		{"a failure dropped, the node at its version (a success)", State{Now: later, FailureDrops: drop("v2"), Nodes: nodes("v2")}, ""},
		{"a failure dropped, the target moved on", State{Now: later, FailureDrops: drop("v3"), Nodes: nodes("v1")}, ""},
		{"a failure dropped, the node gone", State{Now: later, FailureDrops: drop("v2")}, ""},
		{"a failure dropped, the node deleted and back", State{Now: later, FailureDrops: drop("v2"), Nodes: nodes("v1"), Deleted: map[string]time.Time{"a": t0.Add(-5 * time.Second)}}, ""},
		{"a failure dropped, the node deleted long before", State{Now: later, FailureDrops: drop("v2"), Nodes: nodes("v1"), Deleted: map[string]time.Time{"a": t0.Add(-time.Hour)}}, "dropped node a's failure"},
		{"a failure dropped, the node no longer selected", State{Now: later, FailureDrops: unselected, Nodes: nodes("v1")}, ""},
		{"a grant within maxFailures", State{Now: t0, FailureGrants: []FailureGrant{{Channel: "ns/c", Slot: sl, Failures: []string{"x"}, Max: 2}}}, ""},
		{"a retry at maxFailures", State{Now: t0, FailureGrants: []FailureGrant{{Channel: "ns/c", Slot: sl, Failures: []string{"a", "x"}, Max: 2, Retry: true}}}, ""},
		{"a grant at maxFailures", State{Now: t0, FailureGrants: []FailureGrant{{Channel: "ns/c", Slot: sl, Failures: []string{"x", "y"}, Max: 2}}},
			"granted node a a slot at v2 while 2 nodes failed at it (x, y), maxFailures 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, err := FailureCounted(tc.s, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if len(fs) > 0 {
					t.Errorf("want none, got %+v", fs)
				}
				return
			}
			if len(fs) != 1 || !strings.Contains(fs[0].Message, tc.want) {
				t.Errorf("want one finding saying %q, got %+v", tc.want, fs)
			}
		})
	}
}

// failWorld is a channel of maxFailures maxF over pool fc's nodes.
type failWorld struct {
	*world
	uid types.UID
}

func newFailWorld(t *testing.T, cfg Config, maxF int, nodes ...string) *failWorld {
	w := &failWorld{world: newWorld(t, cfg)}
	c := &opsv1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "fc", Namespace: "default"}, Spec: opsv1.UpdateChannelSpec{
		URL: "https://example.invalid/releases", Concurrency: 3, MaxFailures: maxF,
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "fc"}}}}
	c, err := w.oc.OpsV1().UpdateChannels("default").Create(w.ctx, c, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = w.oc.OpsV1().UpdateChannels("default").Delete(context.Background(), "fc", metav1.DeleteOptions{})
	})
	w.uid = c.UID
	for _, n := range nodes {
		w.node(n, map[string]string{"pool": "fc"})
	}
	return w
}

var fcSince = metav1.NewTime(time.Now().Truncate(time.Second))

func fcSlot(node string, attempt int) opsv1.Slot {
	return opsv1.Slot{Node: node, Version: "v2", Attempt: attempt, Since: fcSince, Phase: "Upgrading"}
}

// status writes the channel's slots and failures.
func (w *failWorld) status(slots []opsv1.Slot, failed ...opsv1.Failure) {
	w.t.Helper()
	c, err := w.oc.OpsV1().UpdateChannels("default").Get(w.ctx, "fc", metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	c.Status.Updating, c.Status.Failed = slots, failed
	if _, err := w.oc.OpsV1().UpdateChannels("default").UpdateStatus(w.ctx, c, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

// report writes node's report of its slot ending with outcome.
func (w *failWorld) report(sl opsv1.Slot, outcome string) {
	w.t.Helper()
	rs := protocol.Reports{w.uid: {Version: sl.Version, Attempt: sl.Attempt, Since: sl.Since, Outcome: outcome, Reason: "upgrade job failed", At: metav1.Now()}}
	w.annotate(sl.Node, protocol.AnnotationSlotReport, rs.String())
}

func failure(node string, attempts int) opsv1.Failure {
	return opsv1.Failure{Node: node, Version: "v2", Reason: "upgrade job failed", At: metav1.Now(), Attempts: attempts}
}

// TestPlantedFailureNotCounted: a slot its node reported Failed, ended
// with its failure in status.failed, reports nothing; one ended without
// it is reported; a slot dropped with no word at all is reported once the
// grace has passed.
func TestPlantedFailureNotCounted(t *testing.T) {
	w := newFailWorld(t, Config{Limits: Limits{CountGrace: time.Second}}, 3, "fc-1", "fc-2", "fc-3")
	w.status([]opsv1.Slot{fcSlot("fc-1", 1)})
	w.report(fcSlot("fc-1", 1), protocol.OutcomeFailed)
	time.Sleep(300 * time.Millisecond)
	w.status(nil, failure("fc-1", 1))
	time.Sleep(1500 * time.Millisecond)
	w.quiet("a failure reported and counted")

	w.status([]opsv1.Slot{fcSlot("fc-2", 1)}, failure("fc-1", 1))
	w.report(fcSlot("fc-2", 1), protocol.OutcomeFailed)
	time.Sleep(300 * time.Millisecond)
	w.status(nil, failure("fc-1", 1))
	v := w.expect(InvFailureCounted)
	if !strings.Contains(v.Message, "channel default/fc ended node fc-2's slot at v2 (attempt 1) without counting it in status.failed, though the node had reported it Failed (upgrade job failed)") {
		t.Errorf("message: %s", v.Message)
	}
	if len(v.History["UpdateChannel/default/fc"]) == 0 || len(v.History["Node//fc-2"]) == 0 {
		t.Errorf("history: %v", v.History)
	}

	w.status([]opsv1.Slot{fcSlot("fc-3", 1)}, failure("fc-1", 1))
	time.Sleep(300 * time.Millisecond)
	w.status(nil, failure("fc-1", 1))
	deadline := time.Now().Add(20 * time.Second)
	for {
		var found *Violation
		for _, v := range w.m.Violations() {
			if v.Invariant == InvFailureCounted && strings.Contains(v.Message, "fc-3") {
				found = &v
			}
		}
		if found != nil {
			if !strings.Contains(found.Message, "with no failure counted, no report of the node ending it and no SlotReleased Event within 1s") {
				t.Errorf("message: %s", found.Message)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s violation of fc-3's silent end; recorded: %v", InvFailureCounted, w.m.Violations())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := len(w.m.Violations()); n != 2 {
		t.Errorf("%d violations, want 2 (each recorded once): %v", n, w.m.Violations())
	}
}

// TestPlantedGrantBeyondMaxFailures: with maxFailures 1 and node fc-1
// failed at v2, fc-1's retry reports nothing; a slot for fc-2 is reported.
func TestPlantedGrantBeyondMaxFailures(t *testing.T) {
	w := newFailWorld(t, Config{}, 1, "fc-1", "fc-2")
	w.status(nil, failure("fc-1", 1))
	w.status([]opsv1.Slot{fcSlot("fc-1", 2)}, failure("fc-1", 1))
	time.Sleep(500 * time.Millisecond)
	w.quiet("a failed node's retry at maxFailures")
	w.status([]opsv1.Slot{fcSlot("fc-1", 2), fcSlot("fc-2", 1)}, failure("fc-1", 1))
	v := w.expect(InvFailureCounted)
	if !strings.Contains(v.Message, "channel default/fc granted node fc-2 a slot at v2 while 1 nodes failed at it (fc-1), maxFailures 1") {
		t.Errorf("message: %s", v.Message)
	}
}

// ReadJSON reads back what WriteJSON wrote (a monitor process's file).
func TestReadJSONRoundTrip(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	vs := []Violation{
		{At: at, Invariant: InvFailureCounted, Key: "ns/c/a", Message: "m1", History: map[string][]Version{"Node//a": {{At: at, ResourceVersion: "7", Summary: "s"}}}},
		{At: at.Add(time.Second), Invariant: InvChannelConcurrency, Key: "ns/c", Message: "m2"},
	}
	var b strings.Builder
	for _, v := range vs {
		if err := WriteJSON(&b, v); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ReadJSON(strings.NewReader(b.String() + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !got[0].At.Equal(at) || got[0].Key != "ns/c/a" || got[0].History["Node//a"][0].ResourceVersion != "7" || got[1].Message != "m2" || got[1].History != nil {
		t.Fatalf("read back %+v", got)
	}
	if _, err := ReadJSON(strings.NewReader(b.String() + "{not json\n")); err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("a broken line: %v", err)
	}
}

// TestPlantedFailureDropped: with maxFailures 2, node fc-1's failure
// dropped once it runs v2 (a success) reports nothing; fc-2's dropped
// while it still runs v1 and v2 is the target is reported once the grace
// passed.
func TestPlantedFailureDropped(t *testing.T) {
	w := newFailWorld(t, Config{Limits: Limits{CountGrace: time.Second}}, 2, "fc-1", "fc-2")
	c, err := w.oc.OpsV1().UpdateChannels("default").Get(w.ctx, "fc", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Spec.Version = "v2"
	if _, err := w.oc.OpsV1().UpdateChannels("default").Update(w.ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"fc-1", "fc-2"} {
		w.annotate(n, protocol.AnnotationRootfsVersion, "v1")
	}
	w.status(nil, failure("fc-1", 1), failure("fc-2", 1))
	w.annotate("fc-1", protocol.AnnotationRootfsVersion, "v2")
	w.status(nil, failure("fc-2", 1))
	time.Sleep(1500 * time.Millisecond)
	w.quiet("a failure dropped once its node runs the version")
	w.status(nil)
	v := w.expect(InvFailureCounted)
	if !strings.Contains(v.Message, `channel default/fc dropped node fc-2's failure at v2 (upgrade job failed) from status.failed, though v2 is still its target, the node still selected and it runs "v1", not v2`) {
		t.Errorf("message: %s", v.Message)
	}
}
