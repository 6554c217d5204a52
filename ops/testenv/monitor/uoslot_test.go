package monitor

import (
	"strings"
	"testing"
	"time"

	uo "slipway.dev/slipway/ops/updateoperator"
)

func TestOperatorNotReadySlotRule(t *testing.T) {
	now := time.Unix(10000, 0)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	reboot := OperatorView{Wanted: uo.IntentReboot, Active: uo.IntentReboot, State: uo.StateReady, Current: "v2", Target: "v2"}
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		n       NodeObs
		want    bool
	}{
		{"not checked", 0, NodeObs{InFlight: true, NotReadySince: ago(time.Hour), WantedSince: ago(time.Hour), Operator: reboot}, false},
		{"down past the timeout with a slot", 30 * time.Second, NodeObs{InFlight: true, NotReadySince: ago(time.Minute), WantedSince: ago(2 * time.Minute), Operator: reboot}, true},
		{"down within the timeout and grace", 30 * time.Second, NodeObs{InFlight: true, NotReadySince: ago(40 * time.Second), WantedSince: ago(2 * time.Minute), Operator: reboot}, false},
		{"a new intent starts its clock", 30 * time.Second, NodeObs{InFlight: true, NotReadySince: ago(time.Minute), WantedSince: ago(10 * time.Second), Operator: reboot}, false},
		{"down with no slot", 30 * time.Second, NodeObs{NotReadySince: ago(time.Hour), WantedSince: ago(time.Hour)}, false},
		{"Ready with a slot", 30 * time.Second, NodeObs{Ready: true, InFlight: true, WantedSince: ago(time.Hour), Operator: reboot}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.n.Name = "n"
			fs, err := OperatorNotReadySlot(State{Now: now, Nodes: map[string]NodeObs{"n": tc.n}}, Limits{OperatorStateTimeout: tc.timeout})
			if err != nil {
				t.Fatal(err)
			}
			if got := len(fs) > 0; got != tc.want {
				t.Errorf("violation %t, want %t: %+v", got, tc.want, fs)
			}
		})
	}
}

// TestPlantedNotReadySlot: --state-timeout 1s; a node NotReady with no
// update, and a node told reboot-update that is Ready, report nothing; the
// latter back on v2 and then NotReady past the timeout, still in flight,
// is reported.
func TestPlantedNotReadySlot(t *testing.T) {
	w := newWorld(t, Config{Limits: Limits{OperatorStateTimeout: time.Second, SlotGrace: time.Millisecond}})
	set := w.setOperator
	w.node("slot-idle", nil)
	set("slot-idle", uo.KeyActionWanted, "stabilize", uo.KeyActionActive, "stabilize", uo.KeyActionState, "up-to-date", uo.KeyCurrentVersion, "v1")
	w.status("slot-idle", "", false)
	w.node("slot-sick", nil)
	set("slot-sick", uo.KeyTargetVersion, "v2", uo.KeyActionWanted, "reboot-update", uo.KeyActionActive, "reboot-update", uo.KeyActionState, "ready", uo.KeyCurrentVersion, "v2")
	w.caughtUp("slot-sick")
	time.Sleep(1500 * time.Millisecond) // past the timeout: only the down node with no slot is down
	w.quiet("a NotReady node with no update, a node in flight Ready")
	w.status("slot-sick", "", false)
	v := w.expect(InvOperatorNotReadySlot)
	if !strings.Contains(v.Message, "node slot-sick has held an update slot while NotReady") || !strings.Contains(v.Message, "at reboot-update") {
		t.Errorf("message: %s", v.Message)
	}
	if len(v.History["Node//slot-sick"]) == 0 {
		t.Errorf("no history of the node: %v", v.History)
	}
}
