package controller

import (
	"github.com/prometheus/client_golang/prometheus"
)

// fleetMetrics are what the fleet view reports beside the agent's metrics.
type fleetMetrics struct {
	skipped  *prometheus.GaugeVec // by channel and reason; set by the Lease holder
	resolves prometheus.Counter   // GitHub release resolutions (API requests for a release by tag)
}

func newFleetMetrics(r prometheus.Registerer) *fleetMetrics {
	m := &fleetMetrics{
		skipped: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "slipway_channel_skipped_nodes",
			Help: "Nodes behind a channel's target that get no slot, by reason (NotReady, Unschedulable, NoAgent, OtherChannel), as listed in status.skipped by the agent holding the channel's lease."},
			[]string{"channel", "reason"}),
		resolves: prometheus.NewCounter(prometheus.CounterOpts{Name: "slipway_agent_release_resolutions_total",
			Help: "Releases of GitHub channels this agent resolved for a rollout (one API request each, instead of one per upgrade Job)."}),
	}
	r.MustRegister(m.skipped, m.resolves)
	return m
}

// recordSkipped sets the skipped gauge of channel from its status.
func (m *fleetMetrics) recordSkipped(channel string, skipped []string) {
	m.skipped.DeletePartialMatch(prometheus.Labels{"channel": channel})
	counts := map[string]int{}
	for _, r := range skipped {
		counts[r]++
	}
	for r, c := range counts {
		m.skipped.WithLabelValues(channel, r).Set(float64(c))
	}
}
