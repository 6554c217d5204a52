package plan

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/protocol"
)

func TestViewOf(t *testing.T) {
	since := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	ch := &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "u1", CreationTimestamp: since},
		Spec: v1.UpdateChannelSpec{URL: "github-releases://o/r"},
		Status: v1.UpdateChannelStatus{LatestVersion: "v2", Resolved: &v1.ResolvedRelease{Version: "v2", Source: "https://x/v2"},
			Updating: []v1.Slot{{Node: "a", Version: "v2", Attempt: 1, Since: since, Phase: PhaseRebooting, Job: "j-a"}, {Node: "b", Version: "v2", Attempt: 1, Since: since, Phase: PhaseUpgrading, Job: "j-b"}},
			Staging:  []v1.StagePermit{{Node: "c", Version: "v2", Since: since}},
			Failed:   []v1.Failure{{Node: "d", Version: "v2", Reason: "x"}},
			Counts:   v1.NodeCounts{Nodes: 9}}}
	old := ch.DeepCopy()
	old.Status.Resolved.Version = "v1"
	draining, waiting := ch.DeepCopy(), ch.DeepCopy()
	draining.Status.Updating[0].Phase, waiting.Status.Updating[0].Phase = PhaseDraining, PhaseWaitingReady
	cases := []struct {
		name     string
		ch       *v1.UpdateChannel
		node     string
		follows  bool
		ok       bool
		slot     *v1.Slot
		permit   bool
		resolved bool
	}{
		{"a follower without slot or permit", ch, "d", true, true, nil, false, true},
		{"a node that neither follows nor holds anything", ch, "d", false, false, nil, false, true},
		{"a slot past its drain shows Rebooting", ch, "a", true, true, &v1.Slot{Node: "a", Version: "v2", Attempt: 1, Since: since, Phase: PhaseRebooting, Job: "j-a"}, false, true},
		{"a slot Draining shows as granted (the node's report says Draining)", draining, "a", true, true, &v1.Slot{Node: "a", Version: "v2", Attempt: 1, Since: since, Phase: PhaseUpgrading, Job: "j-a"}, false, true},
		{"a slot WaitingReady shows Rebooting", waiting, "a", true, true, &v1.Slot{Node: "a", Version: "v2", Attempt: 1, Since: since, Phase: PhaseRebooting, Job: "j-a"}, false, true},
		{"a slot in a channel it no longer follows", ch, "b", false, true, &ch.Status.Updating[1], false, true},
		{"a permit", ch, "c", false, true, nil, true, true},
		{"a release resolved for another target is left out", old, "d", true, true, nil, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, ok := ViewOf(c.ch, c.node, c.follows)
			if ok != c.ok {
				t.Fatalf("concerns the node: %v, want %v", ok, c.ok)
			}
			if c.slot != nil && (v.Slot == nil || v.Slot.Phase != c.slot.Phase) || !reflect.DeepEqual(v.Slot != nil, c.slot != nil) {
				t.Errorf("slot %+v, want %+v", v.Slot, c.slot)
			}
			if (v.Permit != nil) != c.permit || (v.Resolved != nil) != c.resolved {
				t.Errorf("permit %v, resolved %v", v.Permit, v.Resolved)
			}
			back, err := protocol.ParseView(v.String())
			if err != nil {
				t.Fatal(err)
			}
			got := back.Channel(c.ch.UID)
			if got.Name != "c" || got.Namespace != "ns" || got.UID != "u1" || !got.CreationTimestamp.Equal(&since) || got.Spec.URL != ch.Spec.URL {
				t.Errorf("channel identity lost: %+v", got.ObjectMeta)
			}
			if Target(Settings{}, got.Status) != "v2" || len(got.Status.Failed) != 0 || got.Status.Counts.Nodes != 0 {
				t.Errorf("the node's channel holds more or less than its own: %+v", got.Status)
			}
			if c.slot != nil && (len(got.Status.Updating) != 1 || !SameSlot(got.Status.Updating[0], *c.slot) || !Holds(got.Status, c.node, *c.slot)) {
				t.Errorf("the node's slot did not survive the annotation: %+v", got.Status.Updating)
			}
			if c.permit && FindPermit(got.Status, c.node) != 0 {
				t.Errorf("the node's permit did not survive the annotation: %+v", got.Status.Staging)
			}
		})
	}
}

func TestParseViewRefusesGarbage(t *testing.T) {
	for _, s := range []string{"", "{", "{}", `{"name":""}`} {
		if _, err := protocol.ParseView(s); err == nil {
			t.Errorf("protocol.ParseView(%q) accepted", s)
		}
	}
}

func TestEndedOnly(t *testing.T) {
	since := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	ch := &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "u1", CreationTimestamp: since},
		Spec:   v1.UpdateChannelSpec{URL: "file:///m", Version: "v2"},
		Status: v1.UpdateChannelStatus{Updating: []v1.Slot{{Node: "a", Version: "v2", Attempt: 1, Since: since, Phase: PhaseRebooting, Job: "j-a"}}}}
	held, _ := ViewOf(ch, "a", true)
	freed := ch.DeepCopy()
	freed.Status.Updating = nil
	none, _ := ViewOf(freed, "a", true)
	respec := freed.DeepCopy()
	respec.Spec.Version = "v3"
	next, _ := ViewOf(respec, "a", true)
	slot := ch.Status.Updating[0]
	ended := protocol.Report{Since: slot.Since, Attempt: 1, Version: "v2", Phase: PhaseRebooting, Outcome: protocol.OutcomeSucceeded}
	running := ended
	running.Outcome = ""
	other := ended
	other.Since = metav1.NewTime(since.Add(time.Minute))
	permitted := freed.DeepCopy()
	permitted.Status.Staging = []v1.StagePermit{{Node: "a", Version: "v2", Since: since}}
	withPermit, _ := ViewOf(permitted, "a", true)
	both := ch.DeepCopy()
	both.Status.Staging = permitted.Status.Staging
	withBoth, _ := ViewOf(both, "a", true)
	permitBack := protocol.Report{PermitDone: &since}
	laterPermit := metav1.NewTime(since.Add(time.Minute))
	otherPermitBack := protocol.Report{PermitDone: &laterPermit}
	endedAndBack := ended
	endedAndBack.PermitDone = &since
	for _, tc := range []struct {
		name      string
		cur, want string
		report    protocol.Report
		ok        bool
	}{
		{"the slot the node reported ended: left", held.String(), none.String(), ended, true},
		{"the slot still under way: written", held.String(), none.String(), running, false},
		{"another slot ended: written", held.String(), none.String(), other, false},
		{"the spec changed too: written", held.String(), next.String(), ended, false},
		{"no slot in the view: nothing to leave", none.String(), next.String(), ended, false},
		{"a slot wanted: written", none.String(), held.String(), ended, false},
		{"not a view: written", "garbage", none.String(), ended, false},
		{"the permit the node gave back: left", withPermit.String(), none.String(), permitBack, true},
		{"a permit not given back: written", withPermit.String(), none.String(), running, false},
		{"an earlier permit given back: written", withPermit.String(), none.String(), otherPermitBack, false},
		{"a permit wanted: written", none.String(), withPermit.String(), permitBack, false},
		{"the permit given back, the slot granted: written", withPermit.String(), held.String(), permitBack, false},
		{"both over: left", withBoth.String(), none.String(), endedAndBack, true},
		{"the slot over, the permit not given back: written", withBoth.String(), none.String(), ended, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := EndedOnly(tc.cur, tc.want, tc.report); got != tc.ok {
				t.Errorf("EndedOnly = %v, want %v", got, tc.ok)
			}
		})
	}
}

func TestSlotLive(t *testing.T) {
	since := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	later := metav1.NewTime(since.Add(time.Minute))
	slot := &v1.Slot{Node: "a", Version: "v2", Attempt: 1, Since: since, Phase: PhaseUpgrading}
	cases := []struct {
		name string
		v    protocol.View
		r    protocol.Report
		want bool
	}{
		{"no slot", protocol.View{}, protocol.Report{}, false},
		{"a slot, no report", protocol.View{Slot: slot}, protocol.Report{}, true},
		{"a slot reported at a phase", protocol.View{Slot: slot}, protocol.Report{Version: "v2", Attempt: 1, Since: since, Phase: PhaseDraining}, true},
		{"a slot reported released", protocol.View{Slot: slot}, protocol.Report{Version: "v2", Attempt: 1, Since: since, Outcome: "Released"}, false},
		{"a slot reported failed", protocol.View{Slot: slot}, protocol.Report{Version: "v2", Attempt: 1, Since: since, Outcome: "Failed"}, false},
		{"an older grant's outcome does not end a new grant", protocol.View{Slot: slot}, protocol.Report{Version: "v2", Attempt: 1, Since: later, Outcome: "Released"}, true},
		{"another attempt's outcome does not end this one", protocol.View{Slot: slot}, protocol.Report{Version: "v2", Attempt: 2, Since: since, Outcome: "Failed"}, true},
	}
	for _, c := range cases {
		if got := SlotLive(c.v, c.r); got != c.want {
			t.Errorf("%s: SlotLive = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestViewGives(t *testing.T) {
	since := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	slot := v1.Slot{Node: "a", Version: "v2", Attempt: 1, Since: since, Phase: PhaseRebooting}
	view := func(s *v1.Slot) string { return protocol.View{Namespace: "ns", Name: "c", Slot: s}.String() }
	regrant := slot
	regrant.Since = metav1.NewTime(since.Add(time.Minute))
	cases := []struct {
		name string
		val  string
		r    protocol.Report
		want bool
	}{
		{"the slot still shown", view(&slot), protocol.Report{}, true},
		{"no slot in the view", view(nil), protocol.Report{}, false},
		{"another grant in the view", view(&regrant), protocol.Report{}, false},
		{"the node reported it ended", view(&slot), protocol.Report{Version: "v2", Attempt: 1, Since: since, Outcome: "Failed"}, false},
		{"an unreadable view", "{", protocol.Report{}, false},
	}
	for _, c := range cases {
		if got := ViewGives(c.val, c.r, slot); got != c.want {
			t.Errorf("%s: ViewGives = %v, want %v", c.name, got, c.want)
		}
	}
}
