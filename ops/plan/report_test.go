package plan

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/protocol"
)

func TestFold(t *testing.T) {
	since := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	later := metav1.NewTime(since.Add(time.Minute))
	slot := func(node string) v1.Slot {
		return v1.Slot{Node: node, Version: "v2", Attempt: 1, Since: since, Phase: PhaseUpgrading, Job: "j-" + node}
	}
	status := func() v1.UpdateChannelStatus {
		return v1.UpdateChannelStatus{Updating: []v1.Slot{slot("a"), slot("b")}, Staging: []v1.StagePermit{{Node: "c", Version: "v2", Since: since}}}
	}
	of := func(r protocol.Report) protocol.Report { r.Since, r.Attempt, r.Version = since, 1, "v2"; return r }
	const uid = types.UID("u1")
	cases := []struct {
		name    string
		reports map[string]protocol.Reports
		slots   []string // nodes holding a slot after the fold, in order
		phaseA  string
		failed  int
		permits int
	}{
		{"no reports", nil, []string{"a", "b"}, PhaseUpgrading, 0, 1},
		{"a phase", map[string]protocol.Reports{"a": {uid: of(protocol.Report{Phase: PhaseRebooting, Job: "j-a"})}}, []string{"a", "b"}, PhaseRebooting, 0, 1},
		{"an older phase does not go back", map[string]protocol.Reports{"a": {uid: of(protocol.Report{Phase: PhasePending})}}, []string{"a", "b"}, PhaseUpgrading, 0, 1},
		{"a succeeded", map[string]protocol.Reports{"a": {uid: of(protocol.Report{Outcome: protocol.OutcomeSucceeded})}}, []string{"b"}, "", 0, 1},
		{"a failed", map[string]protocol.Reports{"a": {uid: of(protocol.Report{Outcome: protocol.OutcomeFailed, Reason: "drain", At: later})}}, []string{"b"}, "", 1, 1},
		{"a released", map[string]protocol.Reports{"a": {uid: of(protocol.Report{Outcome: protocol.OutcomeReleased, Reason: "window"})}}, []string{"b"}, "", 0, 1},
		{"another channel's report", map[string]protocol.Reports{"a": {"u2": of(protocol.Report{Outcome: protocol.OutcomeSucceeded})}}, []string{"a", "b"}, PhaseUpgrading, 0, 1},
		{"an older grant's report", map[string]protocol.Reports{"a": {uid: {Since: later, Attempt: 1, Version: "v2", Outcome: protocol.OutcomeSucceeded}}}, []string{"a", "b"}, PhaseUpgrading, 0, 1},
		{"another attempt's report", map[string]protocol.Reports{"a": {uid: {Since: since, Attempt: 2, Version: "v2", Outcome: protocol.OutcomeFailed}}}, []string{"a", "b"}, PhaseUpgrading, 0, 1},
		{"b's report does not free a", map[string]protocol.Reports{"b": {uid: of(protocol.Report{Outcome: protocol.OutcomeSucceeded})}}, []string{"a"}, PhaseUpgrading, 0, 1},
		{"c gave its permit back", map[string]protocol.Reports{"c": {uid: {PermitDone: &since}}}, []string{"a", "b"}, PhaseUpgrading, 0, 0},
		{"c gave an older permit back", map[string]protocol.Reports{"c": {uid: {PermitDone: &later}}}, []string{"a", "b"}, PhaseUpgrading, 0, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := status()
			Fold(&st, uid, tc.reports)
			var nodes []string
			for _, s := range st.Updating {
				nodes = append(nodes, s.Node)
			}
			if len(nodes) != len(tc.slots) || (len(nodes) > 0 && nodes[0] != tc.slots[0]) {
				t.Errorf("slots %v, want %v", nodes, tc.slots)
			}
			if i := FindSlot(st, "a"); i >= 0 && st.Updating[i].Phase != tc.phaseA {
				t.Errorf("a at %q, want %q", st.Updating[i].Phase, tc.phaseA)
			}
			if len(st.Failed) != tc.failed || len(st.Staging) != tc.permits {
				t.Errorf("failed %v, permits %v", st.Failed, st.Staging)
			}
		})
	}
	r := protocol.Reports{uid: of(protocol.Report{Phase: PhaseDraining})}
	back, err := protocol.ParseReports(r.String())
	if err != nil || back[uid].Phase != PhaseDraining || !back[uid].Since.Time.Equal(since.Time) {
		t.Errorf("round trip: %+v %v", back, err)
	}
	if _, err := protocol.ParseReports("{"); err == nil {
		t.Errorf("a broken annotation parsed")
	}
}
