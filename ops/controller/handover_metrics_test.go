package controller

import (
	"io"
	"log/slog"
	"strings"
	"testing"
)

// TestHandOverDropsTheFleetSeries: a controller that stops holding the
// Lease stops exporting the fleet view's series (nodes by version, nodes
// skipped), which only the holder keeps current.
func TestHandOverDropsTheFleetSeries(t *testing.T) {
	ctl := &Controller{metrics: newMetrics(), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctl.elected.Store(true)
	ctl.metrics.nodes.WithLabelValues("c", "v1").Set(2)
	ctl.metrics.nodes.WithLabelValues("c", "v2").Set(1)
	ctl.metrics.fleet.recordSkipped("c", []string{"cordoned"})
	ctl.handOver()
	fams, err := ctl.metrics.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), "slipway_channel_") && len(f.Metric) > 0 {
			t.Errorf("after the hand-over, %s still has %d series", f.GetName(), len(f.Metric))
		}
	}
	if ctl.elected.Load() {
		t.Error("still elected after the hand-over")
	}
}
