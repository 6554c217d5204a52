package eds

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
)

// metrics are the controller's Prometheus metrics, on its own registry. An
// ExtendedDaemonSet's namespace is the label eds_namespace: Prometheus
// gives every scraped series the target's `namespace` (the controller's), so
// a metric label of that name would be renamed exported_namespace, or, with
// honorLabels, would overwrite the controller's and break the joins on the
// target's namespace and pod. slipway_eds_state's state is the status's
// string as written (Canary Paused, ...), which the alerts match.
type metrics struct {
	registry   *prometheus.Registry
	pods       *prometheus.GaugeVec   // by namespace, eds, ers and state
	state      *prometheus.GaugeVec   // 1 for the EDS's current state
	upToDate   *prometheus.GaugeVec   // rollout progress: up-to-date / desired
	actions    *prometheus.CounterVec // pod creations and deletions
	verdicts   *prometheus.CounterVec // canary outcomes
	syncErrors prometheus.Counter
	syncs      *prometheus.CounterVec // syncs by EDS
	// analyses counts canary analysis evaluations by verdict;
	// analysisFailures the canaries an analysis failed, by query;
	// analysisHolding is 1 while an analysis that cannot be judged holds
	// an ExtendedDaemonSet's canary.
	analyses         *prometheus.CounterVec
	analysisFailures *prometheus.CounterVec
	analysisHolding  *prometheus.GaugeVec
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		pods: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "slipway_eds_pods",
			Help: "Pods of an ExtendedDaemonSet by ERS and state (ready, unavailable)."}, []string{"eds_namespace", "eds", "ers", "state"}),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "slipway_eds_state",
			Help: "1 for the ExtendedDaemonSet's current state, as its status spells it (Running, Canary, Canary Paused, Canary Failed, RollingUpdate Paused, Rollout frozen)."}, []string{"eds_namespace", "eds", "state"}),
		upToDate: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "slipway_eds_rollout_progress_ratio",
			Help: "Up-to-date pods over desired pods of an ExtendedDaemonSet (1 when rolled out)."}, []string{"eds_namespace", "eds"}),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "slipway_eds_pod_actions_total",
			Help: "Pods created and deleted by the controller."}, []string{"action"}),
		verdicts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "slipway_eds_canary_verdicts_total",
			Help: "Canary outcomes: validated, paused, failed."}, []string{"verdict"}),
		syncErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "slipway_eds_sync_errors_total",
			Help: "Syncs that failed and were retried."}),
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "slipway_eds_syncs_total",
			Help: "Syncs of an ExtendedDaemonSet (a Node change syncs only the ExtendedDaemonSets it concerns)."}, []string{"eds_namespace", "eds"}),
		analyses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "slipway_eds_canary_analysis_evaluations_total",
			Help: "Evaluations of canary analyses, by verdict (Pass, Fail, Hold)."}, []string{"verdict"}),
		analysisFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "slipway_eds_canary_analysis_failures_total",
			Help: "Canaries failed by their analysis, by ExtendedDaemonSet and query."}, []string{"eds_namespace", "eds", "query"}),
		analysisHolding: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "slipway_eds_canary_analysis_holding",
			Help: "1 while the analysis of an ExtendedDaemonSet's canary cannot be judged and holds it."}, []string{"eds_namespace", "eds"}),
	}
	m.registry.MustRegister(m.pods, m.state, m.upToDate, m.actions, m.verdicts, m.syncErrors, m.syncs, m.analyses, m.analysisFailures, m.analysisHolding,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// observe publishes an ExtendedDaemonSet's state and pod counts.
func (m *metrics) observe(e *v1.ExtendedDaemonSet, byERS map[string]*counts) {
	for _, s := range []v1.ExtendedDaemonSetStatusState{v1.StateRunning, v1.StateCanary, v1.StateCanaryPaused,
		v1.StateCanaryFailed, v1.StateRollingUpdatePaused, v1.StateRolloutFrozen} {
		v := 0.0
		if e.Status.State == s {
			v = 1
		}
		m.state.WithLabelValues(e.Namespace, e.Name, string(s)).Set(v)
	}
	m.pods.DeletePartialMatch(prometheus.Labels{"eds_namespace": e.Namespace, "eds": e.Name})
	for name, k := range byERS {
		m.pods.WithLabelValues(e.Namespace, e.Name, name, "ready").Set(float64(k.ready))
		m.pods.WithLabelValues(e.Namespace, e.Name, name, "unavailable").Set(float64(k.current - k.available))
	}
	progress := 1.0
	if e.Status.Desired > 0 {
		progress = float64(e.Status.UpToDate) / float64(e.Status.Desired)
	}
	m.upToDate.WithLabelValues(e.Namespace, e.Name).Set(progress)
	holding := 0.0
	if e.Status.Canary != nil && e.Status.Reason == ReasonAnalysisHolding {
		holding = 1
	}
	m.analysisHolding.WithLabelValues(e.Namespace, e.Name).Set(holding)
}

// forget drops a deleted ExtendedDaemonSet's series.
func (m *metrics) forget(ns, name string) {
	l := prometheus.Labels{"eds_namespace": ns, "eds": name}
	m.pods.DeletePartialMatch(l)
	m.state.DeletePartialMatch(l)
	m.upToDate.DeletePartialMatch(l)
	m.syncs.DeletePartialMatch(l)
	m.analysisHolding.DeletePartialMatch(l)
	m.analysisFailures.DeletePartialMatch(l)
}
