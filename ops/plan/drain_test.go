package plan

import (
	"reflect"
	"testing"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

func TestHoldBackDraining(t *testing.T) {
	slot := func(node, phase string) v1.Slot {
		return v1.Slot{Node: node, Version: "v2", Attempt: 1, Phase: phase, Job: "job-" + node}
	}
	before := v1.UpdateChannelStatus{Updating: []v1.Slot{slot("quick", PhaseUpgrading), slot("slow", PhaseUpgrading),
		slot("shown", PhaseDraining), slot("rebooting", PhaseRebooting)}}
	after := v1.UpdateChannelStatus{Updating: []v1.Slot{slot("quick", PhaseDraining), slot("slow", PhaseDraining),
		slot("shown", PhaseDraining), slot("rebooting", PhaseRebooting), slot("new", PhaseDraining)}}
	asked := HoldBackDraining(&after, before, map[string]bool{"slow": true})
	var names []string
	for _, sl := range asked {
		names = append(names, sl.Node)
	}
	if want := []string{"quick", "slow", "shown", "new"}; !reflect.DeepEqual(names, want) {
		t.Errorf("drains asked for %v, want %v", names, want)
	}
	want := map[string]string{"quick": PhaseUpgrading, "slow": PhaseDraining, "shown": PhaseDraining, "rebooting": PhaseRebooting,
		"new": PhaseDraining} // new: no slot before to go back to
	for _, sl := range after.Updating {
		if sl.Phase != want[sl.Node] {
			t.Errorf("%s: phase %s, want %s", sl.Node, sl.Phase, want[sl.Node])
		}
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
