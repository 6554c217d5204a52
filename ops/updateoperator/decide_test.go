package updateoperator

import (
	"reflect"
	"testing"
	"time"

	"slipway.dev/slipway/ops/window"
)

var t0 = time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC) // a Wednesday

func policy() Policy {
	return Policy{MaxConcurrent: 1, Backoff: time.Minute, BackoffMax: 8 * time.Minute,
		Timeouts: Timeouts{Prepare: 10 * time.Minute, Perform: 10 * time.Minute, Reboot: 10 * time.Minute, Health: 10 * time.Minute, Reset: time.Minute}}
}

func node(name string, wanted, active Intent, state State) NodeView {
	return NodeView{Name: name, Wanted: wanted, Active: active, State: state, Ready: true, Transition: t0, BeforeDone: true, AfterDone: true}
}

func versions(n NodeView, current, target string) NodeView {
	n.Current, n.Target = current, target
	return n
}

func TestNext(t *testing.T) {
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	cordoned := func(n NodeView) NodeView { n.CordonedByUs = true; return n }
	healthy := func(n NodeView) NodeView { n.WorkloadsReady = true; return n }
	notReady := func(n NodeView) NodeView { n.Ready = false; return n }
	ahead := func(n NodeView) NodeView { n.Ahead = true; return n }
	drained := func(n NodeView) NodeView { n.CordonedByUs, n.Drained = true, true; return n }
	hooks := func(n NodeView, before, beforeDone, after, afterDone bool) NodeView {
		n.BeforeHook, n.BeforeDone, n.AfterHook, n.AfterDone = before, beforeDone, after, afterDone
		return n
	}
	tests := []struct {
		name string
		n    NodeView
		now  time.Time
		want StepKind
		to   Intent
	}{
		{"new labelled node gets stabilize", func() NodeView {
			n := node("a", IntentUnknown, IntentUnknown, StateUnknown)
			n.Labelled = true
			return n
		}(), at(0), StepWant, IntentStabilize},
		{"new node whose agent reported gets stabilize", func() NodeView {
			n := node("a", IntentUnknown, IntentStabilize, StateUpToDate)
			n.Spoke = true
			return n
		}(), at(0), StepWant, IntentStabilize},
		{"the old operator's agent at rest with an update: held with what to do", func() NodeView {
			n := node("a", IntentStabilize, IntentStabilize, StateReady)
			n.OldAgent, n.UpdateAvailable = true, true
			return n
		}(), at(0), StepStuck, ""},
		{"a node without the label and without an agent: nothing written", node("a", IntentUnknown, IntentUnknown, StateUnknown), at(0), StepNone, ""},
		{"excluded new node untouched", NodeView{Name: "a", Excluded: true}, at(0), StepNone, ""},
		{"stable node: nothing", node("a", IntentStabilize, IntentStabilize, StateUpdateAvailable), at(time.Hour), StepNone, ""},
		{"stable node cordoned by us: uncordon", cordoned(node("a", IntentStabilize, IntentStabilize, StateUpToDate)), at(0), StepUncordon, ""},
		{"prepare acknowledged, busy: wait", node("a", IntentPrepare, IntentPrepare, StateBusy), at(time.Minute), StepNone, ""},
		{"prepare not yet acknowledged: wait", node("a", IntentPrepare, IntentStabilize, StateUpdateAvailable), at(time.Minute), StepNone, ""},
		{"prepare done: perform, in the cordon's write", node("a", IntentPrepare, IntentPrepare, StateReady), at(time.Minute), StepPerform, IntentPerform},
		{"prepare error: fail", node("a", IntentPrepare, IntentPrepare, StateError), at(time.Minute), StepFail, ""},
		{"stale error of an older intent is not this one's", node("a", IntentPrepare, IntentStabilize, StateError), at(time.Minute), StepNone, ""},
		{"prepare past its timeout: fail", node("a", IntentPrepare, IntentPrepare, StateBusy), at(11 * time.Minute), StepFail, ""},
		{"perform wanted, not yet acknowledged: the drain runs beside it", node("a", IntentPerform, IntentPrepare, StateReady), at(0), StepDrain, ""},
		{"performing: the drain runs beside it", node("a", IntentPerform, IntentPerform, StateBusy), at(time.Minute), StepDrain, ""},
		{"performing, drained: wait for the host", drained(node("a", IntentPerform, IntentPerform, StateBusy)), at(time.Minute), StepNone, ""},
		{"perform done, not drained: drain", node("a", IntentPerform, IntentPerform, StateReady), at(time.Minute), StepDrain, ""},
		{"perform done, drained: reboot", drained(node("a", IntentPerform, IntentPerform, StateReady)), at(time.Minute), StepWant, IntentReboot},
		{"perform done, drained, the cordon lifted meanwhile: drain again", func() NodeView {
			n := drained(node("a", IntentPerform, IntentPerform, StateReady))
			n.CordonedByUs = false
			return n
		}(), at(time.Minute), StepDrain, ""},
		{"perform done, cordoned but not drained by this process (a restart): drain again", cordoned(node("a", IntentPerform, IntentPerform, StateReady)), at(time.Minute), StepDrain, ""},
		{"perform error: fail", node("a", IntentPerform, IntentPerform, StateError), at(time.Minute), StepFail, ""},
		{"perform error after the drain: fail", drained(node("a", IntentPerform, IntentPerform, StateError)), at(time.Minute), StepFail, ""},
		{"perform past its timeout, drained: fail", drained(node("a", IntentPerform, IntentPerform, StateBusy)), at(11 * time.Minute), StepFail, ""},
		{"perform past its timeout, not drained: fail, no drain", node("a", IntentPerform, IntentPerform, StateBusy), at(11 * time.Minute), StepFail, ""},
		{"rebooting: wait", cordoned(node("a", IntentReboot, IntentReboot, StateRebooting)), at(time.Minute), StepNone, ""},
		{"never back, cordon lifted by an admin: fails at the reboot timeout all the same", node("a", IntentReboot, IntentReboot, StateRebooting), at(11 * time.Minute), StepFail, ""},
		{"never back, still cordoned: fails at the reboot timeout", cordoned(node("a", IntentReboot, IntentReboot, StateRebooting)), at(11 * time.Minute), StepFail, ""},
		{"rebooting, within the timeout: wait", node("a", IntentReboot, IntentReboot, StateRebooting), at(9 * time.Minute), StepNone, ""},
		{"an unmarked cordon without AdoptOldCordons: not adopted", adoptable(NodeView{Name: "a", Wanted: IntentReboot, Active: IntentReboot, State: StateBusy, Ready: true, Transition: t0}), at(0), StepNone, ""},
		{"back but NotReady: wait", notReady(cordoned(node("a", IntentReboot, IntentReboot, StateReady))), at(time.Minute), StepNone, ""},
		{"back but NotReady past the reboot timeout: fail (its slot freed, its cordon lifted)", notReady(cordoned(node("a", IntentReboot, IntentReboot, StateReady))), at(11 * time.Minute), StepFail, ""},
		{"back, uncordoned, then NotReady past the timeout: fail", notReady(node("a", IntentReboot, IntentReboot, StateReady)), at(11 * time.Minute), StepFail, ""},
		{"back and Ready: uncordon", cordoned(node("a", IntentReboot, IntentReboot, StateReady)), at(time.Minute), StepUncordon, ""},
		{"uncordoned, workloads not ready: wait", node("a", IntentReboot, IntentReboot, StateReady), at(time.Minute), StepNone, ""},
		{"uncordoned, workloads ready: finish", healthy(node("a", IntentReboot, IntentReboot, StateReady)), at(time.Minute), StepFinish, IntentStabilize},
		{"back at the chosen version: uncordon", versions(cordoned(node("a", IntentReboot, IntentReboot, StateReady)), "v2", "v2"), at(time.Minute), StepUncordon, ""},
		{"back at another version (fallback boot): fail, cordon and all", versions(cordoned(node("a", IntentReboot, IntentReboot, StateReady)), "v1", "v2"), at(time.Minute), StepFail, ""},
		{"fallback boot, uncordoned already: fail, not finish", versions(healthy(node("a", IntentReboot, IntentReboot, StateReady)), "v1", "v2"), at(time.Minute), StepFail, ""},
		{"back, no running version reported: fail with what to set, never a success", versions(healthy(node("a", IntentReboot, IntentReboot, StateReady)), "", "v2"), at(time.Minute), StepFail, ""},
		{"no chosen version recorded (an older update): not compared", versions(healthy(node("a", IntentReboot, IntentReboot, StateReady)), "v1", ""), at(time.Minute), StepFinish, IntentStabilize},
		{"workloads never ready: finished with a reason, the slot moves on", node("a", IntentReboot, IntentReboot, StateReady), at(11 * time.Minute), StepFinish, IntentStabilize},
		{"after-reboot hooks never done: finished with a reason", hooks(healthy(node("a", IntentReboot, IntentReboot, StateReady)), false, true, true, false), at(11 * time.Minute), StepFinish, IntentStabilize},
		{"reboot never back: fail", cordoned(node("a", IntentReboot, IntentReboot, StateRebooting)), at(11 * time.Minute), StepFail, ""},
		{"reboot error: fail", cordoned(node("a", IntentReboot, IntentReboot, StateError)), at(time.Minute), StepFail, ""},
		{"drained, before-reboot hooks pending: wait", hooks(drained(node("a", IntentPerform, IntentPerform, StateReady)), true, false, false, false), at(time.Minute), StepNone, ""},
		{"drained, before-reboot hooks done: reboot", hooks(drained(node("a", IntentPerform, IntentPerform, StateReady)), true, true, false, true), at(time.Minute), StepWant, IntentReboot},
		{"drained, hooks done, perform still running: wait", hooks(drained(node("a", IntentPerform, IntentPerform, StateBusy)), true, true, false, true), at(time.Minute), StepNone, ""},
		{"drained, hooks configured but the label gone: drain again (it labels)", hooks(drained(node("a", IntentPerform, IntentPerform, StateReady)), false, false, false, true), at(time.Minute), StepDrain, ""},
		{"before-reboot hooks never done: fail", hooks(drained(node("a", IntentPerform, IntentPerform, StateReady)), true, false, false, false), at(11 * time.Minute), StepFail, ""},
		{"healthy, after-reboot hooks configured: label", hooks(healthy(node("a", IntentReboot, IntentReboot, StateReady)), false, true, false, false), at(time.Minute), StepAfter, ""},
		{"healthy, after-reboot hooks pending: wait", hooks(healthy(node("a", IntentReboot, IntentReboot, StateReady)), false, true, true, false), at(time.Minute), StepNone, ""},
		{"healthy, after-reboot hooks done: finish", hooks(healthy(node("a", IntentReboot, IntentReboot, StateReady)), false, true, true, true), at(time.Minute), StepFinish, IntentStabilize},
		{"prepared ahead: waits for its slot", ahead(node("a", IntentPrepare, IntentPrepare, StateReady)), at(time.Hour), StepNone, ""},
		{"preparing ahead, error: fail", ahead(node("a", IntentPrepare, IntentPrepare, StateError)), at(time.Minute), StepFail, ""},
		{"preparing ahead past its timeout: fail", ahead(node("a", IntentPrepare, IntentPrepare, StateBusy)), at(11 * time.Minute), StepFail, ""},
		{"reset done: stabilize", node("a", IntentReset, IntentReset, StateReady), at(0), StepWant, IntentStabilize},
		{"reset stuck: stabilize anyway", node("a", IntentReset, IntentStabilize, StateBusy), at(2 * time.Minute), StepWant, IntentStabilize},
		{"reset sent, agent busy: wait", node("a", IntentReset, IntentReset, StateBusy), at(30 * time.Second), StepNone, ""},
		{"reset sent, not yet acknowledged: wait", node("a", IntentReset, IntentPrepare, StateError), at(30 * time.Second), StepNone, ""},
		{"reset failed on the host: stabilize (the next prepare overwrites)", node("a", IntentReset, IntentReset, StateError), at(0), StepWant, IntentStabilize},
		{"the old agent at error ignores reset-state: held past the reset timeout", node("a", IntentReset, IntentPerform, StateError), at(2 * time.Minute), StepStuck, ""},
		{"the old agent at error, reset-state just sent: wait", node("a", IntentReset, IntentPerform, StateError), at(30 * time.Second), StepNone, ""},
		{"slipway's agent (reports a version) not answering reset: stabilize anyway", func() NodeView {
			n := node("a", IntentReset, IntentPerform, StateError)
			n.Reports = true
			return n
		}(), at(2 * time.Minute), StepWant, IntentStabilize},
		{"the old agent at error under stabilize (an earlier reset moved on): held", node("a", IntentStabilize, IntentPerform, StateError), at(2 * time.Minute), StepStuck, ""},
		{"slipway's agent failed its check under stabilize: nothing", func() NodeView {
			n := node("a", IntentStabilize, IntentStabilize, StateError)
			return n
		}(), at(2 * time.Minute), StepNone, ""},
		{"the old operator's prepare, never stamped: taken over (its clock starts now), not timed out", func() NodeView {
			n := node("a", IntentPrepare, IntentPrepare, StateBusy)
			n.Transition = time.Time{}
			return n
		}(), at(time.Hour), StepTarget, ""},
		{"reset with the failure's uncordon interrupted: uncordon first", cordoned(node("a", IntentReset, IntentReset, StateReady)), at(0), StepUncordon, ""},
		{"malformed annotation in flight: held, never failed (its uncordon could hit a node mid-reboot)", NodeView{Name: "a", Wanted: IntentReboot, Active: IntentReboot, Invalid: "bad"}, at(0), StepStuck, ""},
		{"malformed intent: held, never written over", NodeView{Name: "a", Wanted: IntentUnknown, WantedInvalid: true, Active: IntentReboot, Invalid: "bad"}, at(0), StepStuck, ""},
		{"malformed annotation at rest: say so", NodeView{Name: "a", Wanted: IntentStabilize, Invalid: "bad"}, at(0), StepStuck, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Next(tc.n, policy(), tc.now)
			if got.Kind != tc.want || got.Wanted != tc.to {
				t.Errorf("Next = %+v, want kind %q wanted %q", got, tc.want, tc.to)
			}
			if (got.Kind == StepFail || got.Kind == StepStuck) && got.Reason == "" {
				t.Error("a failure or a stuck node must say why")
			}
			if got.Kind == StepFinish && tc.now.Sub(tc.n.Transition) > policy().Timeouts.Health && got.Reason == "" {
				t.Error("a node finished past --health-timeout must say why")
			}
		})
	}
}

func TestStopDrain(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    NodeView
		want bool
	}{
		{"perform failed on the host", node("a", IntentPerform, IntentPerform, StateError), true},
		{"performing", node("a", IntentPerform, IntentPerform, StateBusy), false},
		{"performed", node("a", IntentPerform, IntentPerform, StateReady), false},
		{"an older intent's error, perform not yet acknowledged", node("a", IntentPerform, IntentPrepare, StateError), false},
		{"reboot wanted", node("a", IntentReboot, IntentPerform, StateError), false},
	} {
		if got := StopDrain(tc.n); got != tc.want {
			t.Errorf("%s: StopDrain = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestBackoffUntil(t *testing.T) {
	p := policy()
	for failures, want := range map[int]time.Duration{0: -1, 1: time.Minute, 2: 2 * time.Minute, 3: 4 * time.Minute, 4: 8 * time.Minute, 9: 8 * time.Minute} {
		got := BackoffUntil(NodeView{Failures: failures, LastFailure: t0}, p)
		if want < 0 {
			if !got.IsZero() {
				t.Errorf("%d failures: %v, want no backoff", failures, got)
			}
			continue
		}
		if got.Sub(t0) != want {
			t.Errorf("%d failures: backoff %v, want %v", failures, got.Sub(t0), want)
		}
	}
}

func TestStarts(t *testing.T) {
	var lastDone time.Time
	var failed map[string][]string
	avail := func(name string) NodeView { return node(name, IntentStabilize, IntentStabilize, StateUpdateAvailable) }
	with := func(n NodeView, f func(*NodeView)) NodeView { f(&n); return n }
	closed, err := window.Parse([]string{"sat"}, "01:00", "05:00", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	open, err := window.Parse([]string{"wed"}, "09:00", "11:00", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		nodes  []NodeView
		edit   func(*Policy)
		want   []string
		whyNot bool
	}{
		{"one at a time, by name", []NodeView{avail("c"), avail("a"), avail("b")}, nil, []string{"a"}, false},
		{"max concurrent 2", []NodeView{avail("c"), avail("a"), avail("b")}, func(p *Policy) { p.MaxConcurrent = 2 }, []string{"a", "b"}, false},
		{"slot taken by an update in flight", []NodeView{avail("a"), node("b", IntentPerform, IntentPerform, StateBusy)}, nil, nil, true},
		{"slot taken by a leftover cordon", []NodeView{avail("a"), with(avail("b"), func(n *NodeView) { n.State = StateUpToDate; n.CordonedByUs = true })}, nil, nil, true},
		{"fewest failures first", []NodeView{with(avail("a"), func(n *NodeView) { n.Failures = 2; n.LastFailure = t0.Add(-time.Hour) }), avail("b")}, nil, []string{"b"}, false},
		{"in backoff: skipped", []NodeView{with(avail("a"), func(n *NodeView) { n.Failures = 1; n.LastFailure = t0 })}, nil, nil, true},
		{"resetting its host: no slot, no start", []NodeView{avail("a"), with(node("b", IntentReset, IntentReset, StateBusy), func(n *NodeView) { n.Failures = 1; n.LastFailure = t0 })}, nil, []string{"a"}, false},
		{"prepared ahead takes no slot", []NodeView{avail("a"), with(node("b", IntentPrepare, IntentPrepare, StateBusy), func(n *NodeView) { n.Ahead = true })}, nil, []string{"a"}, false},
		{"prepared ahead goes first", []NodeView{avail("a"), with(node("b", IntentPrepare, IntentPrepare, StateReady), func(n *NodeView) { n.Ahead = true })}, nil, []string{"b"}, false},
		{"own node not beside one preparing ahead", []NodeView{with(avail("a"), func(n *NodeView) { n.Own = true }), with(node("b", IntentPrepare, IntentPrepare, StateBusy), func(n *NodeView) { n.Ahead = true })}, func(p *Policy) { p.MaxConcurrent = 5 }, nil, false},
		{"excluded: skipped", []NodeView{with(avail("a"), func(n *NodeView) { n.Excluded = true }), avail("b")}, nil, []string{"b"}, false},
		{"blocking pod: skipped", []NodeView{with(avail("a"), func(n *NodeView) { n.Blocked = true }), avail("b")}, nil, []string{"b"}, false},
		{"not Ready: skipped", []NodeView{with(avail("a"), func(n *NodeView) { n.Ready = false })}, nil, nil, true},
		{"up to date: skipped", []NodeView{node("a", IntentStabilize, IntentStabilize, StateUpToDate)}, nil, nil, true},
		{"own node waits for the others", []NodeView{with(avail("a"), func(n *NodeView) { n.Own = true }), avail("b")}, func(p *Policy) { p.MaxConcurrent = 5 }, []string{"b"}, false},
		{"own node last, alone", []NodeView{with(avail("a"), func(n *NodeView) { n.Own = true })}, nil, []string{"a"}, false},
		{"own node not beside one in flight", []NodeView{with(avail("a"), func(n *NodeView) { n.Own = true }), node("b", IntentReboot, IntentReboot, StateRebooting)}, func(p *Policy) { p.MaxConcurrent = 5 }, nil, false},
		{"pause after the last update ended", []NodeView{avail("a")}, func(p *Policy) { p.PauseBetween = time.Minute }, nil, true},
		{"pause over", []NodeView{avail("a")}, func(p *Policy) { p.PauseBetween = time.Minute; lastDone = t0.Add(-2 * time.Minute) }, []string{"a"}, false},
		{"a node's own update-finished in the future pauses nothing", []NodeView{avail("a"), with(node("b", IntentStabilize, IntentStabilize, StateUpToDate), func(n *NodeView) { n.Finished = time.Date(2999, 1, 1, 0, 0, 0, 0, time.UTC) })},
			func(p *Policy) { p.PauseBetween = time.Minute; lastDone = time.Time{} }, []string{"a"}, false},
		{"the state's last end in the future holds no longer than the pause from now", []NodeView{avail("a")},
			func(p *Policy) { p.PauseBetween = time.Minute; lastDone = time.Date(2999, 1, 1, 0, 0, 0, 0, time.UTC) }, nil, true},
		{"a halted release is not started", []NodeView{with(avail("a"), func(n *NodeView) { n.Available = "v2" })},
			func(p *Policy) { p.HaltAfter = 2; failed = map[string][]string{"v2": {"b", "c"}} }, nil, true},
		{"under --halt-after: started", []NodeView{with(avail("a"), func(n *NodeView) { n.Available = "v2" })},
			func(p *Policy) { p.HaltAfter = 2; failed = map[string][]string{"v2": {"b"}} }, []string{"a"}, false},
		{"one node's failures again and again halt nothing: started", []NodeView{with(avail("a"), func(n *NodeView) { n.Available = "v2" })},
			func(p *Policy) { p.HaltAfter = 2; failed = map[string][]string{"v2": {"b", "b", "b"}} }, []string{"a"}, false},
		{"a new release after a halted one: started", []NodeView{with(avail("a"), func(n *NodeView) { n.Available = "v3" })},
			func(p *Policy) { p.HaltAfter = 2; failed = map[string][]string{"v2": {"b", "c"}} }, []string{"a"}, false},
		{"a node in its backoff, its own last-failure in the future: held only until its backoff from now", []NodeView{with(avail("a"), func(n *NodeView) { n.Failures = 1; n.LastFailure = time.Date(2999, 1, 1, 0, 0, 0, 0, time.UTC) })},
			nil, nil, true},
		{"window closed", []NodeView{avail("a")}, func(p *Policy) { p.Window = closed }, nil, true},
		{"window open", []NodeView{avail("a")}, func(p *Policy) { p.Window = open }, []string{"a"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := policy()
			lastDone, failed = t0.Add(-30*time.Second), nil
			if tc.edit != nil {
				tc.edit(&p)
			}
			got, why := Starts(tc.nodes, p, Fleet{LastDone: lastDone, Failed: failed}, t0)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Starts = %v (%s), want %v", got, why, tc.want)
			}
			if tc.whyNot && why == "" {
				t.Error("no start and no reason given")
			}
		})
	}
}

func TestNewKeysAndParse(t *testing.T) {
	for _, p := range []string{"", DefaultPrefix, BottlerocketPrefix, TharPrefix} {
		if _, err := NewKeys(p); err != nil {
			t.Errorf("NewKeys(%q): %v", p, err)
		}
	}
	for _, p := range []string{"Not_A_Prefix", "a/b", "-x.io"} {
		if _, err := NewKeys(p); err == nil {
			t.Errorf("NewKeys(%q) accepted a bad prefix", p)
		}
	}
	k, _ := NewKeys(BottlerocketPrefix)
	if k.Wanted() != "bottlerocket.aws/action-wanted" || k.InterfaceVersion() != "bottlerocket.aws/updater-interface-version" {
		t.Errorf("keys %s %s", k.Wanted(), k.InterfaceVersion())
	}
	if _, err := ParseIntent("reboot-now"); err == nil {
		t.Error("ParseIntent accepted an intent outside the protocol")
	}
	if i, err := ParseIntent(""); err != nil || i != IntentUnknown {
		t.Errorf("ParseIntent(\"\") = %v, %v", i, err)
	}
	if _, err := ParseState("on-fire"); err == nil {
		t.Error("ParseState accepted a state outside the protocol")
	}
}

func TestDrainBudget(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		started time.Time
		want    time.Duration
	}{
		{"a new drain gets it all", time.Minute, t0, time.Minute},
		{"a resumed drain gets what is left", time.Minute, t0.Add(-40 * time.Second), 20 * time.Second},
		{"a spent budget is a moment, never the whole timeout again", time.Minute, t0.Add(-5 * time.Minute), time.Millisecond},
		{"no timeout: the drain's default", 0, t0.Add(-time.Hour), 0},
	} {
		if got := DrainBudget(tc.timeout, tc.started, t0); got != tc.want {
			t.Errorf("%s: DrainBudget(%s, %s ago) = %s, want %s", tc.name, tc.timeout, t0.Sub(tc.started), got, tc.want)
		}
	}
}

// A node whose intent cannot be read keeps its slot unless its agent
// rests: it may be anywhere in an update, rebooting even.
func TestInFlightGarbledIntent(t *testing.T) {
	for _, tc := range []struct {
		active   Intent
		cordoned bool
		want     bool
	}{
		{IntentReboot, false, true}, {IntentPerform, false, true}, {IntentPrepare, false, true},
		{IntentStabilize, true, true}, {IntentStabilize, false, false}, {IntentReset, false, false}, {IntentUnknown, false, false},
	} {
		n := NodeView{Name: "a", Wanted: IntentUnknown, WantedInvalid: true, Active: tc.active, CordonedByUs: tc.cordoned, Invalid: "bad"}
		if got := InFlight(n); got != tc.want {
			t.Errorf("garbled intent, agent active %s, cordoned %v: in flight %v, want %v", tc.active, tc.cordoned, got, tc.want)
		}
	}
}

func adoptable(n NodeView) NodeView { n.UnmarkedCordon = true; return n }

// The old operator's cordon is adopted only when the cluster moves over
// (the old prefixes), on a node told reboot-update that this controller
// never stamped; an admin's cordon of a node this controller updated stays
// the admin's.
func TestAdoptOldCordons(t *testing.T) {
	p := policy()
	p.AdoptOldCordons = true
	old := adoptable(NodeView{Name: "a", Wanted: IntentReboot, Active: IntentReboot, State: StateBusy, Ready: true})
	if s := Next(old, p, t0); s.Kind != StepAdopt {
		t.Errorf("old operator's cordon: %+v, want adopt", s)
	}
	back := old
	back.State = StateReady
	if s := Next(back, p, t0); s.Kind != StepAdopt {
		t.Errorf("old operator's cordon, agent back already: %+v, want adopt", s)
	}
	ours := old
	ours.Transition = t0
	if s := Next(ours, p, t0.Add(time.Minute)); s.Kind == StepAdopt {
		t.Error("an unmarked cordon on a node this controller stamped (an admin's) was adopted")
	}
	if s := Next(old, policy(), t0); s.Kind == StepAdopt {
		t.Error("adopted without AdoptOldCordons")
	}
	midDrain := adoptable(NodeView{Name: "a", Wanted: IntentPerform, Active: IntentPerform, State: StateReady, Ready: true})
	if s := Next(midDrain, p, t0); s.Kind != StepAdopt {
		t.Errorf("the old operator's cordon mid-drain (it drains at perform-update/ready): %+v, want adopt", s)
	}
}

func TestCordonedSince(t *testing.T) {
	k, _ := NewKeys(DefaultPrefix)
	at := time.Date(2026, 11, 26, 5, 0, 0, 0, time.UTC)
	later := at.Add(time.Minute)
	for _, tc := range []struct {
		name string
		ours bool
		ann  map[string]string
		want time.Time
		ok   bool
	}{
		{"cordoned by the operator: the drain's start", true, map[string]string{k.Key(KeyDrainStarted): stamp(at), k.Key(KeyTransition): stamp(later)}, at, true},
		{"an old cordon without a drain start: the last transition", true, map[string]string{k.Key(KeyTransition): stamp(later)}, later, true},
		{"a garbled drain start: the last transition", true, map[string]string{k.Key(KeyDrainStarted): "soon", k.Key(KeyTransition): stamp(later)}, later, true},
		{"cordoned by someone else", false, map[string]string{k.Key(KeyDrainStarted): stamp(at)}, time.Time{}, false},
		{"ours, no time at all", true, map[string]string{}, time.Time{}, false},
	} {
		got, ok := k.CordonedSince(NodeView{CordonedByUs: tc.ours}, tc.ann)
		if ok != tc.ok || !got.Equal(tc.want) {
			t.Errorf("%s: %v %v, want %v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	if got := CordonLimit(10*time.Minute, Timeouts{Reboot: 30 * time.Minute, Prepare: time.Hour}); got != 40*time.Minute {
		t.Errorf("CordonLimit = %s, want 40m (drain + reboot)", got)
	}
	if got := CordonLimit(10*time.Minute, Timeouts{Perform: 15 * time.Minute, Reboot: 30 * time.Minute}); got != 45*time.Minute {
		t.Errorf("CordonLimit = %s, want 45m (perform, the longer of the two beside each other, + reboot)", got)
	}
}

// A failure the agent reported keeps the agent's words in the reason the
// controller writes over them.
func TestHostFailureKeepsTheAgentsWords(t *testing.T) {
	for _, c := range []struct {
		name   string
		reason string
		want   string
	}{
		{"agent's words", "disk full", "perform-update failed on the host: disk full"},
		{"none given", "", "perform-update failed on the host"},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := NodeView{Name: "a", Wanted: IntentPerform, Active: IntentPerform, State: StateError, Reason: c.reason}
			if s := Next(n, Policy{}, t0); s.Kind != StepFail || s.Reason != c.want {
				t.Errorf("Next = %s %q, want fail %q", s.Kind, s.Reason, c.want)
			}
		})
	}
}

func TestAdoptedTarget(t *testing.T) {
	with := func(n NodeView, edit func(*NodeView)) NodeView { edit(&n); return n }
	tests := []struct {
		name string
		n    NodeView
		want string
	}{
		{"prepare of the old operator, the host lists v2", with(node("a", IntentPrepare, IntentPrepare, StateReady), func(n *NodeView) { n.Available = "v2" }), "v2"},
		{"perform done: what the next boot starts wins", with(node("a", IntentPerform, IntentPerform, StateReady), func(n *NodeView) { n.Available, n.Staged = "v3", "v2" }), "v2"},
		{"a target chosen already: kept", with(node("a", IntentPrepare, IntentPrepare, StateReady), func(n *NodeView) { n.Available, n.Target = "v3", "v2" }), ""},
		{"the host has not reported yet: nothing", node("a", IntentPrepare, IntentPrepare, StateBusy), ""},
		{"rebooting with v2 staged", with(node("a", IntentReboot, IntentReboot, StateRebooting), func(n *NodeView) { n.Staged, n.Available = "v2", "v2" }), "v2"},
		{"rebooted already, a newer release listed: nothing to compare", with(node("a", IntentReboot, IntentReboot, StateReady), func(n *NodeView) { n.Current, n.Available = "v2", "v3" }), ""},
		{"reboot-update with only a release listed: not the reboot's", with(node("a", IntentReboot, IntentReboot, StateBusy), func(n *NodeView) { n.Available = "v3" }), ""},
		{"at rest: nothing", with(node("a", IntentStabilize, IntentStabilize, StateUpdateAvailable), func(n *NodeView) { n.Available = "v2" }), ""},
		{"unreadable annotations: nothing", with(node("a", IntentPrepare, IntentPrepare, StateReady), func(n *NodeView) { n.Available, n.Invalid = "v2", "x" }), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := AdoptedTarget(tt.n); got != tt.want {
				t.Errorf("AdoptedTarget = %q, want %q", got, tt.want)
			}
			if s := Next(tt.n, policy(), t0); (s.Kind == StepTarget) != (tt.want != "") || s.Version != tt.want {
				t.Errorf("Next = %+v, want a target step to %q", s, tt.want)
			}
		})
	}
}
