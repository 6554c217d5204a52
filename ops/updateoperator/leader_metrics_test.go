package updateoperator

import (
	"strings"
	"testing"
)

// TestForgetLeaderViewDropsLeaderSeries: what lead's exit calls drops the
// series only the leader reports, so a former leader exports no cordon a
// node no longer has and no update in flight.
func TestForgetLeaderViewDropsLeaderSeries(t *testing.T) {
	m := newMetrics()
	m.nodes.WithLabelValues("idle", "v1").Set(3)
	m.cordonedSince.WithLabelValues("node-a").Set(1.7e9)
	m.inFlight.Set(1)
	m.forgetLeaderView()
	fams, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		switch name := f.GetName(); {
		case name == "slipway_update_operator_updates_in_flight":
			if v := f.Metric[0].GetGauge().GetValue(); v != 0 {
				t.Errorf("updates in flight after losing the lead: %v", v)
			}
		case strings.HasPrefix(name, "slipway_update_operator_nodes") || strings.HasPrefix(name, "slipway_update_operator_node_cordoned"):
			if len(f.Metric) > 0 {
				t.Errorf("after losing the lead, %s still has %d series", name, len(f.Metric))
			}
		}
	}
}
