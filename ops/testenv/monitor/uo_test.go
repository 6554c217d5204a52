package monitor

import (
	"strings"
	"testing"
	"time"

	uo "slipway.dev/slipway/ops/updateoperator"
)

func TestObserveOperator(t *testing.T) {
	now := time.Unix(1000, 0)
	v := func(wanted, active uo.Intent, state uo.State, current, target string) OperatorView {
		return OperatorView{Wanted: wanted, Active: active, State: state, Current: current, Target: target}
	}
	for _, tc := range []struct {
		name             string
		prev, n          OperatorView
		fail, start, fin bool
	}{
		{"started", v(uo.IntentStabilize, uo.IntentStabilize, uo.StateUpToDate, "v1", ""), v(uo.IntentPrepare, uo.IntentStabilize, uo.StateUpToDate, "v1", "v2"), false, true, false},
		{"the host fails prepare", v(uo.IntentPrepare, uo.IntentPrepare, uo.StateBusy, "v1", "v2"), v(uo.IntentPrepare, uo.IntentPrepare, uo.StateError, "v1", "v2"), true, false, false},
		{"an error at rest is no release's", v(uo.IntentStabilize, uo.IntentStabilize, uo.StateBusy, "v1", ""), v(uo.IntentStabilize, uo.IntentStabilize, uo.StateError, "v1", ""), false, false, false},
		{"back on the target: a success", v(uo.IntentReboot, uo.IntentReboot, uo.StateReady, "v2", "v2"), v(uo.IntentStabilize, uo.IntentReboot, uo.StateReady, "v2", "v2"), false, false, true},
		{"fell back, failed", v(uo.IntentReboot, uo.IntentReboot, uo.StateReady, "v1", "v2"), v(uo.IntentReset, uo.IntentReboot, uo.StateReady, "v1", "v2"), true, false, false},
		{"a refused drain is not the release's", v(uo.IntentPerform, uo.IntentPerform, uo.StateReady, "v1", "v2"), v(uo.IntentReset, uo.IntentPerform, uo.StateReady, "v1", "v2"), false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, s, fin := observeOperator("n", tc.prev, true, tc.n, now)
			if (f != nil) != tc.fail || (s != nil) != tc.start || (fin != nil) != tc.fin {
				t.Errorf("failure %v start %v finish %v, want %t %t %t", f, s, fin, tc.fail, tc.start, tc.fin)
			}
		})
	}
}

func TestOperatorBrakeRule(t *testing.T) {
	t0 := time.Unix(1000, 0)
	fails := []ReleaseFailure{{"n1", "v2", t0}, {"n1", "v2", t0.Add(time.Second)}, {"n2", "v2", t0.Add(2 * time.Second)}, {"n3", "v3", t0}}
	for _, tc := range []struct {
		name  string
		halt  int
		start ReleaseStart
		want  bool
	}{
		{"not checked", 0, ReleaseStart{"n4", "v2", t0.Add(time.Minute)}, false},
		{"before the second node failed", 2, ReleaseStart{"n4", "v2", t0.Add(1500 * time.Millisecond)}, false},
		{"within the grace of the halt", 2, ReleaseStart{"n4", "v2", t0.Add(4 * time.Second)}, false},
		{"past the brake", 2, ReleaseStart{"n4", "v2", t0.Add(10 * time.Second)}, true},
		{"one node failing twice halts nothing", 3, ReleaseStart{"n4", "v2", t0.Add(time.Minute)}, false},
		{"another release", 2, ReleaseStart{"n4", "v4", t0.Add(time.Minute)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, err := OperatorBrake(State{ReleaseFailures: fails, ReleaseStarts: []ReleaseStart{tc.start}}, Limits{OperatorHaltAfter: tc.halt})
			if err != nil {
				t.Fatal(err)
			}
			if got := len(fs) > 0; got != tc.want {
				t.Errorf("violation %t, want %t: %+v", got, tc.want, fs)
			}
		})
	}
}

// TestPlantedStartPastTheBrake: --halt-after 2; v2 fails on two nodes
// (the host's error, then a fallback), and a third node told to prepare
// v2 is reported; the starts before the brake are not.
func TestPlantedStartPastTheBrake(t *testing.T) {
	w := newWorld(t, Config{Limits: Limits{OperatorHaltAfter: 2, BrakeGrace: time.Millisecond}})
	set := w.setOperator
	for _, n := range []string{"brake-1", "brake-2", "brake-3"} {
		w.node(n, nil)
		set(n, uo.KeyActionWanted, "stabilize", uo.KeyActionActive, "stabilize", uo.KeyActionState, "up-to-date", uo.KeyCurrentVersion, "v1")
	}
	set("brake-1", uo.KeyTargetVersion, "v2", uo.KeyActionWanted, "prepare-update")
	set("brake-1", uo.KeyActionActive, "prepare-update", uo.KeyActionState, "error")
	set("brake-2", uo.KeyTargetVersion, "v2", uo.KeyActionWanted, "prepare-update")
	set("brake-2", uo.KeyActionWanted, "perform-update")
	set("brake-2", uo.KeyActionWanted, "reboot-update")
	set("brake-2", uo.KeyActionWanted, "reset-state") // came back on v1: fell back
	time.Sleep(50 * time.Millisecond)
	w.quiet("two nodes started, each failing")
	set("brake-3", uo.KeyTargetVersion, "v2", uo.KeyActionWanted, "prepare-update")
	v := w.expect(InvOperatorBrake)
	if !strings.Contains(v.Message, "node brake-3 started an update to v2") || !strings.Contains(v.Message, "failed on 2 nodes (brake-1, brake-2)") {
		t.Errorf("message: %s", v.Message)
	}
}

// TestPlantedFallbackCountedASuccess: a node told to stabilize after
// reboot-update while it runs v2 reports nothing; one running v1 (it fell
// back) is reported.
func TestPlantedFallbackCountedASuccess(t *testing.T) {
	w := newWorld(t, Config{})
	set := w.setOperator
	for _, n := range []string{"fallback-1", "fallback-2"} {
		w.node(n, nil)
		set(n, uo.KeyTargetVersion, "v2", uo.KeyActionWanted, "reboot-update", uo.KeyCurrentVersion, "v1")
	}
	set("fallback-1", uo.KeyCurrentVersion, "v2")
	set("fallback-1", uo.KeyActionWanted, "stabilize")
	time.Sleep(50 * time.Millisecond)
	w.quiet("back on v2, finished")
	set("fallback-2", uo.KeyActionWanted, "stabilize")
	v := w.expect(InvFallbackFailure)
	if !strings.Contains(v.Message, `node fallback-2's update to v2 counted a success while it runs "v1"`) {
		t.Errorf("message: %s", v.Message)
	}
}

// setOperator writes the update operator's protocol annotations kv (key
// suffix, value, ...) on node, one write each.
func (w *world) setOperator(node string, kv ...string) {
	w.t.Helper()
	k, err := uo.NewKeys("")
	if err != nil {
		w.t.Fatal(err)
	}
	for i := 0; i < len(kv); i += 2 {
		w.annotate(node, k.Key(kv[i]), kv[i+1])
	}
}
