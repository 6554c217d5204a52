package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the agent's Prometheus metrics, on its own registry.
type metrics struct {
	registry   *prometheus.Registry
	nodes      *prometheus.GaugeVec   // by channel and version; set by the fleet-view holder
	slotWait   prometheus.Histogram   // behind the target until a slot was held
	upgrade    prometheus.Histogram   // slot taken until freed after success
	drain      prometheus.Histogram   // one drain
	failures   *prometheus.CounterVec // by channel and step
	claimed    prometheus.Counter     // slots this agent assigned
	conflicts  prometheus.Counter     // status writes that hit a resourceVersion conflict
	polls      *prometheus.CounterVec // by result
	stalls     prometheus.Counter     // reboots refused or not happened, requested again
	rollbacks  prometheus.Counter     // rollback Jobs created for swaps left staged
	rbFailed   prometheus.Counter     // rollback Jobs that failed (retried after a backoff)
	viewWrites prometheus.Counter     // Node writes of the nodes' channel views (the controller's)
	fleet      *fleetMetrics          // the fleet view's own (fleet_metrics.go)
}

func newMetrics() *metrics {
	buckets := prometheus.ExponentialBuckets(1, 2, 14) // 1 s .. ~2 h
	m := &metrics{
		registry: prometheus.NewRegistry(),
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "slipway_channel_nodes",
			Help: "Nodes selected by a channel, by the release they run (reported by the agent holding the channel's lease)."}, []string{"channel", "version"}),
		slotWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "slipway_agent_slot_wait_seconds",
			Help: "How long this node ran behind its channel's target before it held a slot.", Buckets: buckets}),
		upgrade: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "slipway_agent_upgrade_duration_seconds",
			Help: "From taking a slot to freeing it after a successful upgrade and reboot.", Buckets: buckets}),
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
		stalls: prometheus.NewCounter(prometheus.CounterOpts{Name: "slipway_agent_reboot_stalls_total",
			Help: "Reboots of this node refused, or not happened within --reboot-stall-timeout, and requested again."}),
		rollbacks: prometheus.NewCounter(prometheus.CounterOpts{Name: "slipway_agent_rollbacks_total",
			Help: "Rollback Jobs this agent created for a swap its rollout left staged without the reboot."}),
		rbFailed: prometheus.NewCounter(prometheus.CounterOpts{Name: "slipway_agent_rollback_failures_total",
			Help: "Rollback Jobs of this node that failed; each is retried after a backoff (--retry-backoff)."}),
		viewWrites: prometheus.NewCounter(prometheus.CounterOpts{Name: "slipway_controller_view_writes_total",
			Help: "Node patches by the controller writing the nodes' channel views (their slots, permits, targets and settings)."}),
	}
	m.registry.MustRegister(m.nodes, m.slotWait, m.upgrade, m.drain, m.failures, m.claimed, m.conflicts, m.polls, m.stalls, m.rollbacks, m.rbFailed, m.viewWrites,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.fleet = newFleetMetrics(m.registry)
	return m
}
