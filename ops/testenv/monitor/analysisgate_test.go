package monitor

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	opsv1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	uo "slipway.dev/slipway/ops/updateoperator"
)

func TestChannelHold(t *testing.T) {
	cond := func(typ string, st metav1.ConditionStatus) []metav1.Condition {
		return []metav1.Condition{{Type: typ, Status: st, Reason: "R", Message: "m"}}
	}
	for _, tc := range []struct {
		name string
		st   opsv1.UpdateChannelStatus
		want string
	}{
		{"no analysis", opsv1.UpdateChannelStatus{}, ""},
		{"a passed analysis", opsv1.UpdateChannelStatus{Analysis: &opsv1.AnalysisStatus{}, Conditions: cond(opsv1.ConditionAnalysisHolding, "False")}, ""},
		{"holding", opsv1.UpdateChannelStatus{Conditions: cond(opsv1.ConditionAnalysisHolding, "True")}, "condition AnalysisHolding"},
		{"failed", opsv1.UpdateChannelStatus{Analysis: &opsv1.AnalysisStatus{Failed: &opsv1.AnalysisFailure{Query: "q", Nodes: []string{"a"}, Reason: "r"}}}, "status.analysis.failed: query q"},
		{"the failed condition", opsv1.UpdateChannelStatus{Conditions: cond(opsv1.ConditionAnalysisFailed, "True")}, "condition AnalysisFailed"},
		{"a wave not passed", opsv1.UpdateChannelStatus{Analysis: &opsv1.AnalysisStatus{Wave: []string{"a"}}}, "wave a not passed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := channelHold(&opsv1.UpdateChannel{Status: tc.st})
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("channelHold = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRollbackSlotsAreNoGrants: while the analysis failed, the rollback
// slots of the failed wave are the failure's answer; a forward slot is a
// grant the rule judges.
func TestRollbackSlotsAreNoGrants(t *testing.T) {
	ch := &opsv1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}, Status: opsv1.UpdateChannelStatus{
		Analysis: &opsv1.AnalysisStatus{Failed: &opsv1.AnalysisFailure{Query: "q", Nodes: []string{"a"}, Reason: "r"}},
		Updating: []opsv1.Slot{{Node: "a", Version: "v1", Rollback: true}, {Node: "b", Version: "v2"}},
	}}
	got := observeChannelGrants(nil, true, ch, time.Unix(1000, 0))
	if len(got) != 1 || got[0].Node != "b" || !strings.Contains(got[0].Hold, "status.analysis.failed") {
		t.Fatalf("grants = %+v, want only node b's forward slot, held by the failure", got)
	}
}

func TestAnalysisGateRule(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	held := []FleetObs{{Key: "cm", At: at(0), Hold: "failed"}}
	for _, tc := range []struct {
		name string
		s    State
		want bool
	}{
		{"a grant with no hold", State{Now: at(0), SlotGrants: []SlotGrant{{Channel: "ns/c", Node: "a", At: at(0)}}}, false},
		{"a grant while holding", State{Now: at(0), SlotGrants: []SlotGrant{{Channel: "ns/c", Node: "a", Hold: "baking", At: at(0)}}}, true},
		{"a start before any fleet state", State{Now: at(time.Minute), GateStarts: []ReleaseStart{{"n", "v2", at(time.Second)}}}, false},
		{"a start while failed", State{Now: at(time.Minute), Fleet: held, GateStarts: []ReleaseStart{{"n", "v2", at(time.Second)}}}, true},
		{"not judged within the grace", State{Now: at(2 * time.Second), Fleet: held, GateStarts: []ReleaseStart{{"n", "v2", at(time.Second)}}}, false},
		{"the lift seen just after the start", State{Now: at(time.Minute), Fleet: append(held, FleetObs{Key: "cm", At: at(1500 * time.Millisecond)}),
			GateStarts: []ReleaseStart{{"n", "v2", at(time.Second)}}}, false},
		{"the lift seen long after the start", State{Now: at(time.Minute), Fleet: append(held, FleetObs{Key: "cm", At: at(30 * time.Second)}),
			GateStarts: []ReleaseStart{{"n", "v2", at(time.Second)}}}, true},
		{"a start after the lift", State{Now: at(time.Minute), Fleet: append(held, FleetObs{Key: "cm", At: at(time.Second)}),
			GateStarts: []ReleaseStart{{"n", "v2", at(2 * time.Second)}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, err := AnalysisGate(tc.s, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if got := len(fs) > 0; got != tc.want {
				t.Errorf("violation %t, want %t: %+v", got, tc.want, fs)
			}
		})
	}
}

// TestPlantedSlotWhileAnalysisHolds: an UpdateChannel granting a slot
// with its analysis passed reports nothing; one granting a slot in the
// status that says AnalysisHolding is reported.
func TestPlantedSlotWhileAnalysisHolds(t *testing.T) {
	w := newWorld(t, Config{})
	w.channel("gate", 2, "gate")
	w.node("gate-1", map[string]string{"pool": "gate"})
	w.node("gate-2", map[string]string{"pool": "gate"})
	status := func(hold metav1.ConditionStatus, slots ...string) {
		t.Helper()
		c, err := w.oc.OpsV1().UpdateChannels("default").Get(w.ctx, "gate", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.Status.Updating = nil
		for _, n := range slots {
			c.Status.Updating = append(c.Status.Updating, opsv1.Slot{Node: n, Version: "v2"})
		}
		c.Status.Analysis = &opsv1.AnalysisStatus{}
		c.Status.Conditions = []metav1.Condition{{Type: opsv1.ConditionAnalysisHolding, Status: hold, Reason: "CannotJudge",
			Message: "prometheus: connection refused", LastTransitionTime: metav1.Now()}}
		if _, err := w.oc.OpsV1().UpdateChannels("default").UpdateStatus(w.ctx, c, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	status("False")
	status("False", "gate-1")
	status("True", "gate-1") // holding, the slot granted before stays
	time.Sleep(300 * time.Millisecond)
	w.quiet("a slot granted while the analysis passed, kept while it holds")
	status("True", "gate-1", "gate-2")
	v := w.expect(InvAnalysisGate)
	if !strings.Contains(v.Message, "channel default/gate granted node gate-2 a slot while its analysis holds: condition AnalysisHolding (CannotJudge)") {
		t.Errorf("message: %s", v.Message)
	}
}

// TestPlantedStartWhileAnalysisFailed: the update operator's fleet state
// records a failed analysis; a node started before it reports nothing, a
// node started after it is reported once the grace has passed.
func TestPlantedStartWhileAnalysisFailed(t *testing.T) {
	w := newWorld(t, Config{Limits: Limits{GateGrace: 100 * time.Millisecond}})
	set := w.setOperator
	for _, n := range []string{"gate-a", "gate-b"} {
		w.node(n, nil)
		set(n, uo.KeyActionWanted, "stabilize", uo.KeyActionActive, "stabilize", uo.KeyActionState, "update-available", uo.KeyCurrentVersion, "v1")
	}
	b, _ := json.Marshal(uo.Fleet{})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: uo.FleetStateName(""), Namespace: "default"}, Data: map[string]string{"fleet": string(b)}}
	if _, err := w.c.CoreV1().ConfigMaps("default").Create(w.ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = w.c.CoreV1().ConfigMaps("default").Delete(context.Background(), cm.Name, metav1.DeleteOptions{})
	})
	set("gate-a", uo.KeyTargetVersion, "v2", uo.KeyActionWanted, "prepare-update")
	time.Sleep(500 * time.Millisecond)
	b, _ = json.Marshal(uo.Fleet{AnalysisFailed: &uo.AnalysisFailure{Query: "error-rate", Reason: "0.3 > 0.05", Nodes: []string{"gate-a"}, Version: "v2"}})
	cm.Data["fleet"] = string(b)
	if _, err := w.c.CoreV1().ConfigMaps("default").Update(w.ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	w.quiet("a node started before the analysis failed")
	set("gate-b", uo.KeyTargetVersion, "v2", uo.KeyActionWanted, "prepare-update")
	v := w.expect(InvAnalysisGate)
	if !strings.Contains(v.Message, "the update operator started node gate-b's update to v2 while its analysis holds: analysisFailed: analysis failed after the wave gate-a") {
		t.Errorf("message: %s", v.Message)
	}
	if len(v.History["ConfigMap/default/"+uo.FleetStateName("")]) == 0 {
		t.Errorf("no history of the fleet state: %v", v.History)
	}
}
