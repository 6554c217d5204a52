package controller

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the controller's Prometheus metrics, on its own registry
// (their names are the ones the agent and the controller were one program
// with: dashboards and alerts keep working).
type metrics struct {
	registry   *prometheus.Registry
	nodes      *prometheus.GaugeVec   // by channel and version; set by the Lease holder
	drain      prometheus.Histogram   // one drain
	failures   *prometheus.CounterVec // by channel and step (stale, drain)
	claimed    prometheus.Counter     // slots this controller assigned
	conflicts  prometheus.Counter     // status writes that hit a resourceVersion conflict
	polls      *prometheus.CounterVec // by result
	viewWrites prometheus.Counter     // Node writes of the nodes' channel views
	fleet      *fleetMetrics          // the fleet view's own (fleet_metrics.go)
	analysis   *analysisMetrics       // the channels' analyses (analysis.go)
}

func newMetrics() *metrics {
	buckets := prometheus.ExponentialBuckets(1, 2, 14) // 1 s .. ~2 h
	m := &metrics{
		registry: prometheus.NewRegistry(),
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "slipway_channel_nodes",
			Help: "Nodes selected by a channel, by the release they run (reported by the agent holding the channel's lease)."}, []string{"channel", "version"}),
		drain: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "slipway_agent_drain_duration_seconds",
			Help: "How long draining this node took.", Buckets: buckets}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "slipway_agent_upgrade_failures_total",
			Help: "Failed upgrades recorded by this agent, by step."}, []string{"channel", "step"}),
		claimed: prometheus.NewCounter(prometheus.CounterOpts{Name: "slipway_agent_slots_assigned_total",
			Help: "Slots this agent assigned while holding a channel's lease."}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{Name: "slipway_agent_status_conflicts_total",
			Help: "Channel status writes refused for a stale resourceVersion (then retried on fresh state)."}),
		polls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "slipway_agent_polls_total",
			Help: "Polls of a channel's latest release, by result."}, []string{"result"}),
		viewWrites: prometheus.NewCounter(prometheus.CounterOpts{Name: "slipway_controller_view_writes_total",
			Help: "Node patches by the controller writing the nodes' channel views (their slots, permits, targets and settings)."}),
	}
	m.registry.MustRegister(m.nodes, m.drain, m.failures, m.claimed, m.conflicts, m.polls, m.viewWrites,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.fleet = newFleetMetrics(m.registry)
	m.analysis = newAnalysisMetrics(m.registry)
	return m
}
