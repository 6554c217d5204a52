package controller

import (
	"github.com/prometheus/client_golang/prometheus"

	"slipway.dev/slipway/ops/swarm/plan"
)

// metrics are the controller's Prometheus metrics, on a registry of its own.
type metrics struct {
	reg                         *prometheus.Registry
	jobs, workers, unassigned   *prometheus.GaugeVec
	version, invalid, converged *prometheus.GaugeVec
	moves, refreshes            *prometheus.CounterVec
	leader                      prometheus.Gauge
}

func newMetrics() *metrics {
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "slipway", Subsystem: "swarm", Name: name, Help: help}, []string{"swarm"})
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "slipway", Subsystem: "swarm", Name: name, Help: help}, []string{"swarm"})
	}
	m := &metrics{
		reg:        prometheus.NewRegistry(),
		jobs:       gauge("jobs", "Jobs in the Swarm's list."),
		workers:    gauge("workers", "Workers holding a share."),
		unassigned: gauge("unassigned_jobs", "Jobs no worker holds."),
		version:    gauge("version", "Version of the assignment in force."),
		invalid:    gauge("invalid", "1 while the Swarm cannot be assigned."),
		converged:  gauge("converged", "1 when every worker runs its share."),
		moves:      counter("moves_total", "Jobs moved from one worker to another."),
		refreshes:  counter("refreshes_total", "Workers restarted because their share changed."),
		leader:     prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "slipway", Subsystem: "swarm", Name: "leader", Help: "1 while this replica holds the Lease."}),
	}
	m.reg.MustRegister(m.jobs, m.workers, m.unassigned, m.version, m.invalid, m.converged, m.moves, m.refreshes, m.leader)
	return m
}

// observe records a Swarm's decision.
func (m *metrics) observe(swarm string, in plan.Input, d plan.Decision) {
	m.jobs.WithLabelValues(swarm).Set(float64(len(in.Jobs)))
	m.workers.WithLabelValues(swarm).Set(float64(len(d.Config.Workloads)))
	m.unassigned.WithLabelValues(swarm).Set(float64(d.Unassigned))
	m.version.WithLabelValues(swarm).Set(float64(d.Config.Version))
	m.invalid.WithLabelValues(swarm).Set(0)
	c := 0.0
	if d.Converged {
		c = 1
	}
	m.converged.WithLabelValues(swarm).Set(c)
}

// forget drops a deleted Swarm's series.
func (m *metrics) forget(swarm string) {
	for _, v := range []*prometheus.GaugeVec{m.jobs, m.workers, m.unassigned, m.version, m.invalid, m.converged} {
		v.DeleteLabelValues(swarm)
	}
	m.moves.DeleteLabelValues(swarm)
	m.refreshes.DeleteLabelValues(swarm)
}
