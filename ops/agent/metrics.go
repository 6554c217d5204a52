package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the agent's Prometheus metrics, on its own registry.
type metrics struct {
	registry  *prometheus.Registry
	slotWait  prometheus.Histogram   // behind the target until a slot was held
	upgrade   prometheus.Histogram   // slot taken until freed after success
	failures  *prometheus.CounterVec // by channel and step
	stalls    prometheus.Counter     // reboots refused or not happened, requested again
	rollbacks prometheus.Counter     // rollback Jobs created for swaps left staged
	rbFailed  prometheus.Counter     // rollback Jobs that failed (retried after a backoff)
	workOpen  prometheus.Gauge       // 1 while the watches of this node's Node, Jobs and pods are open (workwatch.go)
}

func newMetrics() *metrics {
	buckets := prometheus.ExponentialBuckets(1, 2, 14) // 1 s .. ~2 h
	m := &metrics{
		registry: prometheus.NewRegistry(),
		slotWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "slipway_agent_slot_wait_seconds",
			Help: "How long this node ran behind its channel's target before it held a slot.", Buckets: buckets}),
		upgrade: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "slipway_agent_upgrade_duration_seconds",
			Help: "From taking a slot to freeing it after a successful upgrade and reboot.", Buckets: buckets}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "slipway_agent_upgrade_failures_total",
			Help: "Failed upgrades recorded by this agent, by step."}, []string{"channel", "step"}),
		stalls: prometheus.NewCounter(prometheus.CounterOpts{Name: "slipway_agent_reboot_stalls_total",
			Help: "Reboots of this node refused, or not happened within --reboot-stall-timeout, and requested again."}),
		rollbacks: prometheus.NewCounter(prometheus.CounterOpts{Name: "slipway_agent_rollbacks_total",
			Help: "Rollback Jobs this agent created for a swap its rollout left staged without the reboot."}),
		rbFailed: prometheus.NewCounter(prometheus.CounterOpts{Name: "slipway_agent_rollback_failures_total",
			Help: "Rollback Jobs of this node that failed; each is retried after a backoff (--retry-backoff)."}),
		workOpen: prometheus.NewGauge(prometheus.GaugeOpts{Name: "slipway_agent_work_watches_open",
			Help: "1 while this agent watches its Node, its node's Jobs and their pods: from the node's first work until it has had none for the linger (5 min)."}),
	}
	m.registry.MustRegister(m.slotWait, m.upgrade, m.failures, m.stalls, m.rollbacks, m.rbFailed, m.workOpen,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
