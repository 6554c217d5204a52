package updateoperator

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"slipway.dev/slipway/ops/health"
)

// metrics are the operator's Prometheus metrics, on their own registry.
type metrics struct {
	registry    *prometheus.Registry
	nodes       *prometheus.GaugeVec   // by state and version (controller)
	inFlight    prometheus.Gauge       // updates in flight (controller)
	failures    *prometheus.CounterVec // by node (controller)
	transitions *prometheus.CounterVec // steps taken, by kind (controller)
	intents     *prometheus.CounterVec // intents carried out, by intent and result (agent)
	reads       *prometheus.CounterVec // how the controller read Nodes: cache, list, get
	// cordonedSince is when the operator cordoned each node it holds
	// cordoned; cordonLimit how long a cordon of its may last (controller).
	cordonedSince *prometheus.GaugeVec
	cordonLimit   prometheus.Gauge
	// halted is 1 for each release the brake holds (controller).
	halted *prometheus.GaugeVec
	// analysisFailed is 1 while a failed analysis halts the rollout (by
	// query and the wave's version); analysisHolding 1 while the analysis
	// holds starts (it cannot be judged, alerts block, or it fails with no
	// wave to blame); analysisEvaluations counts evaluations by verdict.
	analysisFailed      *prometheus.GaugeVec
	analysisHolding     prometheus.Gauge
	analysisEvaluations *prometheus.CounterVec
}

// forgetLeaderView drops the series only the leader reports (nodes by
// state, cordons held, updates in flight, releases halted) when this process stops leading:
// the next leader reports them, and a former leader's last values would
// otherwise keep alerts firing (a cordon alert on a node since uncordoned).
func (m *metrics) forgetLeaderView() {
	m.nodes.Reset()
	m.cordonedSince.Reset()
	m.inFlight.Set(0)
	m.halted.Reset()
	m.analysisFailed.Reset()
	m.analysisHolding.Set(0)
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "slipway_update_operator_nodes",
			Help: "Nodes by the state their agent reports and the version they run."}, []string{"state", "version"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "slipway_update_operator_updates_in_flight",
			Help: "Nodes between prepare-update and the end of their update (at most --max-concurrent)."}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "slipway_update_operator_failures_total",
			Help: "Failed node updates counted by the controller, by node."}, []string{"node"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "slipway_update_operator_steps_total",
			Help: "Steps the controller took, by kind (want, drain, uncordon, finish, fail, stuck)."}, []string{"step"}),
		intents: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "slipway_update_operator_agent_intents_total",
			Help: "Intents this agent carried out, by intent and result."}, []string{"intent", "result"}),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "slipway_update_operator_node_reads_total",
			Help: "How the controller read Nodes: a turn from its cache, a quorum LIST (the cache lagged its own writes), a GET."}, []string{"how"}),
		cordonedSince: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "slipway_update_operator_node_cordoned_since_timestamp_seconds",
			Help: "When the operator cordoned the node for its update (drain-started), for each node it holds cordoned."}, []string{"node"}),
		cordonLimit: prometheus.NewGauge(prometheus.GaugeOpts{Name: "slipway_update_operator_cordon_limit_seconds",
			Help: "How long a cordon of the operator may last: the drain beside perform-update, the longer of their timeouts, then the reboot's (max(--drain-timeout, --state-timeout) + --state-timeout)."}),
		halted: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "slipway_update_operator_rollout_halted",
			Help: "1 for each release whose rollout is halted: it failed --halt-after times; no node starts it until a new release or `slipway update-operator resume`."}, []string{"version"}),
		analysisFailed: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "slipway_update_operator_analysis_failed",
			Help: "1 while a failed analysis halts the rollout, by the query that failed and the version of the failed wave: no node starts until `slipway update-operator resume`."}, []string{"query", "version"}),
		analysisHolding: prometheus.NewGauge(prometheus.GaugeOpts{Name: "slipway_update_operator_analysis_holding",
			Help: "1 while the analysis holds every start without failing a wave: Prometheus cannot be asked, a query errs or has no data, an alert blocks, or it fails before any node updated."}),
		analysisEvaluations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "slipway_update_operator_analysis_evaluations_total",
			Help: "Evaluations of the analysis (--analysis-file, --prometheus-url), by verdict (Pass, Fail, Hold)."}, []string{"verdict"}),
	}
	m.registry.MustRegister(m.nodes, m.inFlight, m.failures, m.transitions, m.intents, m.reads, m.cordonedSince, m.cordonLimit, m.halted,
		m.analysisFailed, m.analysisHolding, m.analysisEvaluations,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// serve serves /metrics on addr until ctx ends ("" = off).
func (m *metrics) serve(ctx context.Context, addr string, log *slog.Logger) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{}))
	return health.ListenAndServe(ctx, addr, mux, log)
}
