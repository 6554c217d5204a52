package plan

import (
	"reflect"
	"testing"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

func TestDrainsDue(t *testing.T) {
	st := v1.UpdateChannelStatus{Updating: []v1.Slot{{Node: "a", Phase: PhaseUpgrading}, {Node: "b", Phase: PhaseDraining},
		{Node: "c", Phase: PhaseRebooting}, {Node: "d", Phase: PhaseDraining}}}
	if got := DrainsDue(Settings{Drain: Drain{Enabled: true}}, st); len(got) != 2 || got[0].Node != "b" || got[1].Node != "d" {
		t.Errorf("drains due %+v, want b and d", got)
	}
	if got := DrainsDue(Settings{}, st); got != nil {
		t.Errorf("drain disabled: drains due %+v, want none", got)
	}
}

func TestLeftCordoned(t *testing.T) {
	nodes := []Cordon{
		{Node: "held", Owner: "slipway-agent", For: "ns/c"},
		{Node: "free", Owner: "slipway-agent", For: "ns/c"},
		{Node: "draining", Owner: "slipway-agent", For: "ns/c"},
		{Node: "other-install", Owner: "slipway-agent", For: "other/c"},
		{Node: "old-agent", Owner: "slipway-agent"},
		{Node: "someone-else", Owner: "kubectl", For: "ns/c"},
	}
	got := LeftCordoned(nodes, "slipway-agent", "ns", map[string]bool{"held": true}, map[string]bool{"draining": true})
	if want := []string{"free"}; !reflect.DeepEqual(got, want) {
		t.Errorf("left cordoned %v, want %v", got, want)
	}
}
