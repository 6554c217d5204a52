package controller

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"slipway.dev/slipway/ops/analysis"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/plan"
)

// Reasons of the analysis's Events on a channel.
const (
	ReasonAnalysisFailed = "AnalysisFailed"
	ReasonAnalysisPassed = "AnalysisPassed"
)

// analysisCache is what the Lease holder remembers of a channel's
// analysis between passes: the client of its Prometheus and the last
// evaluation.
type analysisCache struct {
	url     string
	querier analysis.Querier
	last    *plan.Judged
}

// analysisMetrics say what the channels' analyses decide.
type analysisMetrics struct {
	failed      *prometheus.GaugeVec   // 1 while a failed analysis halts the channel, by channel, query and version
	holding     *prometheus.GaugeVec   // 1 while the analysis holds new slots (cannot judge, baking), by channel
	evaluations *prometheus.CounterVec // by channel and verdict
	backout     *backoutMetrics        // the rollbacks of failed waves (backout.go)
}

func newAnalysisMetrics(r prometheus.Registerer) *analysisMetrics {
	m := &analysisMetrics{
		failed: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "slipway_channel_analysis_failed",
			Help: "1 while a failed analysis halts the channel's rollout (status.analysis.failed), by the query that failed and the version of the wave."},
			[]string{"channel", "query", "version"}),
		holding: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "slipway_channel_analysis_holding",
			Help: "1 while the channel's analysis holds new slots: a wave bakes, or the analysis cannot be evaluated (the AnalysisHolding condition says why)."},
			[]string{"channel"}),
		evaluations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "slipway_channel_analysis_evaluations_total",
			Help: "Evaluations of the channels' analyses, by verdict (Pass, Fail, Hold)."}, []string{"channel", "verdict"}),
	}
	r.MustRegister(m.failed, m.holding, m.evaluations)
	m.backout = newBackoutMetrics(r)
	return m
}

// askAnalysis evaluates the channel's analysis when it matters in this
// pass (a wave to judge, or nodes behind that would get a slot) and no
// failure already halts the channel; the last evaluation serves while it
// is fresh (analysis.FreshAfter). nil: nothing was asked.
func (ctl *Controller) askAnalysis(ctx context.Context, fc *fleetCache, name string, a *plan.Analysis, st v1.UpdateChannelStatus,
	target string, behind bool, now time.Time) *plan.Judged {
	if a == nil {
		fc.analysis = analysisCache{}
		return nil
	}
	var wave []string
	var bakeUntil time.Time
	if as := st.Analysis; as != nil {
		if as.Failed != nil && as.Failed.Version == target {
			return nil
		}
		if as.WaveVersion == "" || as.WaveVersion == target {
			wave = as.Wave
		}
		if as.BakeUntil != nil {
			bakeUntil = as.BakeUntil.Time
		}
	}
	if len(wave) == 0 && !behind {
		return nil
	}
	c := &fc.analysis
	if last := c.last; last != nil && c.url == a.URL && slices.Equal(last.Wave, wave) &&
		!last.Result.At.Before(analysis.FreshAfter(bakeUntil, a.Interval, now)) {
		return last
	}
	r := analysis.Evaluate(ctx, ctl.querierOf(c, name, a.URL), a.Spec, wave, now)
	ctl.metrics.analysis.evaluations.WithLabelValues(name, string(r.Verdict)).Inc()
	c.last = &plan.Judged{Result: r, Wave: slices.Clone(wave)}
	return c.last
}

// querierOf is the channel's Prometheus client, made again when its
// address changed.
func (ctl *Controller) querierOf(c *analysisCache, channel, url string) analysis.Querier {
	if c.querier == nil || c.url != url {
		q, err := analysis.NewClient(url)
		if err != nil { // the CRD and plan.ResolveAnalysis refuse such a URL: this is a guard
			ctl.log.Error("analysis: Prometheus client", "channel", channel, "err", err)
		}
		c.url, c.querier, c.last = url, q, nil
	}
	return c.querier
}

// analysisEvents says what the analysis decided in a pass: a Warning Event
// for a failed wave, a Normal one for a passed wave, and the metrics.
func (ctl *Controller) analysisEvents(ch *v1.UpdateChannel, step plan.AnalysisStep) {
	m := ctl.metrics.analysis
	m.failed.DeletePartialMatch(prometheus.Labels{"channel": ch.Name})
	m.holding.DeletePartialMatch(prometheus.Labels{"channel": ch.Name})
	if ch.Spec.Analysis == nil {
		return
	}
	if f := step.Failed; f != nil {
		ctl.log.Warn("analysis failed: rollout halted", "channel", ch.Name, "query", f.Query, "value", f.Value, "nodes", f.Nodes)
		ctl.recorder.Event(ch, corev1.EventTypeWarning, ReasonAnalysisFailed, plan.FailureMessage(*f))
	}
	if len(step.Passed) > 0 {
		ctl.recorder.Eventf(ch, corev1.EventTypeNormal, ReasonAnalysisPassed, "analysis passed after the wave %s", strings.Join(step.Passed, ", "))
	}
	if as := ch.Status.Analysis; as != nil && as.Failed != nil {
		m.failed.WithLabelValues(ch.Name, as.Failed.Query, as.Failed.Version).Set(1)
	} else if meta.IsStatusConditionTrue(ch.Status.Conditions, v1.ConditionAnalysisHolding) {
		m.holding.WithLabelValues(ch.Name).Set(1)
	} else {
		m.holding.WithLabelValues(ch.Name).Set(0)
	}
}

// analysisJoinedRecheck is how soon a pass in which nodes joined the wave
// looks again: the analysis judges the new wave then.
const analysisJoinedRecheck = 200 * time.Millisecond
