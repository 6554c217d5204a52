package eds

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"slipway.dev/slipway/ops/analysis"
	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/eds/plan"
)

// defaultAnalysisInterval is how often a canary's analysis is asked when
// spec.strategy.canary.analysis.interval is unset.
const defaultAnalysisInterval = 10 * time.Second

// canaryAnalysis is a resolved spec.strategy.canary.analysis.
type canaryAnalysis struct {
	url      string
	spec     analysis.Spec
	interval time.Duration
	key      string // the spec as written: an edited analysis is asked afresh
}

// resolveCanaryAnalysis checks an analysis and applies its defaults (nil:
// none). The CRD refuses most bad analyses at apply; this is for the
// rest (an alert filter that does not compile) and for objects stored
// before the rules.
func resolveCanaryAnalysis(a *v1.CanaryAnalysis) (*canaryAnalysis, error) {
	if a == nil {
		return nil, nil
	}
	const field = "spec.strategy.canary.analysis"
	out := &canaryAnalysis{url: a.PrometheusURL, interval: defaultAnalysisInterval}
	if _, err := analysis.NewClient(a.PrometheusURL); err != nil {
		return nil, fmt.Errorf("%s.prometheusURL %q: write the Prometheus address as http(s)://host:port", field, a.PrometheusURL)
	}
	for _, q := range a.Queries {
		out.spec.Queries = append(out.spec.Queries, analysis.Query{Name: q.Name, Expr: q.Query, Condition: q.Condition, NoData: q.NoData})
	}
	if err := out.spec.Validate(); err != nil {
		return nil, fmt.Errorf("%s.queries: %w", field, err)
	}
	if g := a.Alerts; g != nil {
		re, err := analysis.AlertFilter(g.FilterRegexp)
		if err != nil {
			return nil, fmt.Errorf("%s.alerts.filterRegexp: %w", field, err)
		}
		out.spec.Alerts = analysis.Alerts{Enabled: true, Filter: re, MatchOnly: g.FilterMatchOnly, FiringOnly: g.FiringOnly}
	}
	if out.spec.Empty() {
		return nil, fmt.Errorf("%s asks nothing: list queries (name, query, condition) or set alerts: {}", field)
	}
	for _, d := range []struct {
		name string
		v    *metav1.Duration
		to   *time.Duration
	}{{"interval", a.Interval, &out.interval}, {"timeout", a.Timeout, &out.spec.Timeout}} {
		if d.v == nil {
			continue
		}
		if d.v.Duration <= 0 {
			return nil, fmt.Errorf("%s.%s is %s: write a positive duration such as 10s", field, d.name, d.v.Duration)
		}
		*d.to = d.v.Duration
	}
	b, _ := json.Marshal(a)
	out.key = string(b)
	return out, nil
}

// analysisMemo is the latest evaluation of one canary's analysis.
type analysisMemo struct {
	key    string
	result analysis.Result
}

// judgeAnalysis asks the canary's analysis when its latest evaluation is
// older than the interval (or older than the moment the canary could be
// validated, when it could now), and lets it amend r.verdict
// (plan.JudgeCanaryAnalysis). The evaluation is kept in memory for this
// canary ERS only; a restarted controller asks again.
func (c *Controller) judgeAnalysis(ctx context.Context, r *round, p plan.CanaryPolicy, s plan.CanaryState) error {
	a, err := resolveCanaryAnalysis(r.e.Spec.Strategy.Canary.Analysis)
	if err != nil || a == nil {
		return err // validate() refused it before
	}
	res := c.latestAnalysis(r.canary.UID, a.key)
	decided := r.verdict.Action == plan.Fail || r.verdict.Reason == plan.ReasonManuallyValidated
	stale := res == nil || c.opts.Now().Sub(res.At) >= a.interval ||
		(r.verdict.Action == plan.Validate && res.At.Before(plan.ValidationDue(p, s)))
	if stale && !decided {
		q, _ := analysis.NewClient(a.url) // checked by resolveCanaryAnalysis
		// The whole evaluation within half the sync's allowance: queries a
		// hung Prometheus leaves unanswered past it hold (they are not
		// evaluated), and the worker stays alive for /healthz.
		ectx, cancel := context.WithTimeout(ctx, c.loopAllowance/2)
		out := analysis.Evaluate(ectx, q, a.spec, r.canaryNodes, c.opts.Now())
		cancel()
		if ctx.Err() != nil {
			return ctx.Err() // stopping: an evaluation cut short is no verdict
		}
		c.metrics.analyses.WithLabelValues(string(out.Verdict)).Inc()
		c.mu.Lock()
		c.analyses[r.canary.UID] = analysisMemo{key: a.key, result: out}
		c.mu.Unlock()
		res = &out
	}
	j := plan.JudgeCanaryAnalysis(p, s, r.verdict, res)
	r.verdict, r.analysisHold, r.analysisCannotJudge = j.Verdict, j.Hold, j.CannotJudge
	if res != nil {
		st := &v1.CanaryAnalysisStatus{Verdict: string(res.Verdict), Reason: res.Reason(), At: metav1.Time{Time: res.At}}
		if f, ok := res.Cause(); ok {
			st.Query, st.Value = f.Query, f.Value
		}
		if st.Reason == "" {
			st.Reason = j.Hold
		}
		r.analysis = st
		if res.Verdict == analysis.Fail {
			r.failDetail = "analysis: " + res.Reason()
		}
		r.later(max(res.At.Add(a.interval).Sub(c.opts.Now()), time.Millisecond))
	} else {
		r.analysis = &v1.CanaryAnalysisStatus{Verdict: "Judging", Reason: j.Hold}
		r.later(a.interval)
	}
	return nil
}

func (c *Controller) latestAnalysis(ers types.UID, key string) *analysis.Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.analyses[ers]
	if !ok || m.key != key {
		return nil
	}
	res := m.result
	return &res
}

// forgetAnalysis drops the evaluations of a canary that ended.
func (c *Controller) forgetAnalysis(ers types.UID) {
	c.mu.Lock()
	delete(c.analyses, ers)
	c.mu.Unlock()
}

// setAnalysisCondition sets CanaryAnalysisHolding on a status: True while
// the analysis holds the running canary (CannotJudge: it could not be
// evaluated; Judging: no evaluation passed since it could be validated);
// absent on an ExtendedDaemonSet whose canary names no analysis.
func setAnalysisCondition(st *v1.ExtendedDaemonSetStatus, e *v1.ExtendedDaemonSet, r *round) {
	if e.Spec.Strategy.Canary == nil || e.Spec.Strategy.Canary.Analysis == nil {
		meta.RemoveStatusCondition(&st.Conditions, v1.ConditionCanaryAnalysisHolding)
		return
	}
	switch {
	case r.canary == nil:
		setCond(&st.Conditions, v1.ConditionCanaryAnalysisHolding, false, "NoCanary", "no canary runs")
	case r.analysisCannotJudge:
		setCond(&st.Conditions, v1.ConditionCanaryAnalysisHolding, true, "CannotJudge", r.analysisHold)
	case r.analysisHold != "":
		setCond(&st.Conditions, v1.ConditionCanaryAnalysisHolding, true, "Judging", r.analysisHold)
	default:
		setCond(&st.Conditions, v1.ConditionCanaryAnalysisHolding, false, "Passing", "the analysis does not hold the canary")
	}
}

// analysisEventMessage says which query failed the canary, its value and
// expression, and where.
func analysisEventMessage(r *round, res *v1.CanaryAnalysisStatus) string {
	return fmt.Sprintf("canary ERS %s failed its analysis on nodes %s: %s; restoring the template of ERS %s",
		r.canary.Name, strings.Join(r.canaryNodes, ", "), res.Reason, r.active.Name)
}
