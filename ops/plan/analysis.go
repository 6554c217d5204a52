package plan

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/analysis"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// ReasonBadAnalysis is the Invalid condition's reason for a spec.analysis
// that cannot be evaluated as written.
const ReasonBadAnalysis = "BadAnalysis"

// Analysis is a resolved spec.analysis.
type Analysis struct {
	URL      string
	Spec     analysis.Spec
	Bake     time.Duration
	Interval time.Duration
	// Rollback: a failed wave's nodes are rolled back (onFailure: rollback).
	Rollback bool
}

// DefaultAnalysisInterval is how often the analysis is asked while it
// matters, when spec.analysis.interval is unset.
const DefaultAnalysisInterval = 10 * time.Second

// ResolveAnalysis checks spec.analysis and applies its defaults; nil: the
// channel has no analysis. The CRD refuses most bad analyses at apply;
// this is for what it cannot check (a filter that does not compile).
func ResolveAnalysis(a *v1.AnalysisSpec) (*Analysis, *Invalid) {
	if a == nil {
		return nil, nil
	}
	bad := func(format string, args ...any) (*Analysis, *Invalid) {
		return nil, &Invalid{ReasonBadAnalysis, "spec.analysis" + fmt.Sprintf(format, args...)}
	}
	out := &Analysis{URL: a.PrometheusURL, Interval: DefaultAnalysisInterval}
	switch a.OnFailure {
	case "", v1.OnFailureHalt:
	case v1.OnFailureRollback:
		out.Rollback = true
	default:
		return bad(".onFailure %q: write halt or rollback", a.OnFailure)
	}
	if !strings.HasPrefix(a.PrometheusURL, "http://") && !strings.HasPrefix(a.PrometheusURL, "https://") {
		return bad(".prometheusURL %q: write the Prometheus address as http(s)://host:port", a.PrometheusURL)
	}
	for _, q := range a.Queries {
		out.Spec.Queries = append(out.Spec.Queries, analysis.Query{Name: q.Name, Expr: q.Query, Condition: q.Condition, NoData: q.NoData})
	}
	if err := out.Spec.Validate(); err != nil {
		return bad(".queries: %v", err)
	}
	if g := a.Alerts; g != nil {
		re, err := analysis.AlertFilter(g.FilterRegexp)
		if err != nil {
			return bad(".alerts.filterRegexp: %v", err)
		}
		out.Spec.Alerts = analysis.Alerts{Enabled: true, Filter: re, MatchOnly: g.FilterMatchOnly, FiringOnly: g.FiringOnly}
	}
	if out.Spec.Empty() {
		return bad(" asks nothing: list queries (name, query, condition) or set alerts: {}")
	}
	for _, d := range []struct {
		name string
		v    *metav1.Duration
		to   *time.Duration
		zero bool // 0 allowed
	}{{"bakeTime", a.BakeTime, &out.Bake, true}, {"interval", a.Interval, &out.Interval, false}, {"timeout", a.Timeout, &out.Spec.Timeout, false}} {
		if d.v == nil {
			continue
		}
		if d.v.Duration < 0 || (d.v.Duration == 0 && !d.zero) {
			return bad(".%s is %s: write a positive duration such as 10s", d.name, d.v.Duration)
		}
		*d.to = d.v.Duration
	}
	return out, nil
}

// Judged is one evaluation of a channel's analysis: its result, and the
// wave it judged ($nodes).
type Judged struct {
	Result analysis.Result
	Wave   []string
}

// AnalysisStep is what the analysis says of one pass over the status.
type AnalysisStep struct {
	// Hold, when set, is why no slot is granted in this pass.
	Hold string
	// Failed is the failure this pass recorded (nil: none new).
	Failed *v1.AnalysisFailure
	// Passed is the wave that passed in this pass.
	Passed []string
	// Joined are the nodes that joined the wave in this pass.
	Joined []string
	// Finishing are the nodes still in the slots of the wave's release
	// that a failing analysis waits for (inFlight): the wave fails with
	// them once they finished.
	Finishing []string
}

// StepAnalysis applies the analysis a to the status of one pass, pure:
// the nodes that finished their upgrade in this pass (succeeded) join the
// wave and start its bake again; a failure recorded for another version
// than the target is forgotten (a new release is judged afresh); then j,
// the evaluation made for this pass (nil: none was), is judged
// (analysis.JudgeWave). A Fail with a wave records status.analysis.failed,
// which holds every slot until the target changes; while nodes granted
// beside the wave still upgrade to its release (Finishing), it holds and
// waits for them to join the wave, so that the wave fails (and is rolled
// back) with every node on its release. An evaluation of
// another wave than the one now in the status (nodes joined since) holds
// this pass: the next evaluation judges the new wave. now is the time of
// the status write (a bake starts then); j is judged at its own time. The AnalysisFailed
// and AnalysisHolding conditions say what holds. a == nil clears it all.
func StepAnalysis(a *Analysis, st *v1.UpdateChannelStatus, succeeded []string, target string, j *Judged, now time.Time, generation int64) AnalysisStep {
	if a == nil {
		st.Analysis = nil
		meta.RemoveStatusCondition(&st.Conditions, v1.ConditionAnalysisFailed)
		meta.RemoveStatusCondition(&st.Conditions, v1.ConditionAnalysisHolding)
		return AnalysisStep{}
	}
	if st.Analysis == nil {
		st.Analysis = &v1.AnalysisStatus{}
	}
	as := st.Analysis
	var step AnalysisStep
	if (as.Failed != nil && as.Failed.Version != target) || (as.WaveVersion != "" && as.WaveVersion != target) {
		*as = v1.AnalysisStatus{Resumed: as.Resumed} // another release: judged afresh (a resume acts once)
	}
	for _, n := range succeeded {
		if !slices.Contains(as.Wave, n) {
			as.Wave = append(as.Wave, n)
			step.Joined = append(step.Joined, n)
		}
	}
	if len(step.Joined) > 0 {
		as.WaveVersion = target
		if a.Bake > 0 {
			as.BakeUntil = &metav1.Time{Time: bakeEnd(now, a.Bake)}
		}
	}
	bakeUntil := time.Time{}
	if as.BakeUntil != nil {
		bakeUntil = as.BakeUntil.Time
	}
	switch {
	case as.Failed != nil:
		step.Hold = FailureMessage(*as.Failed)
	case j == nil:
		step.Hold = "the analysis was not asked in this pass"
	case !slices.Equal(j.Wave, as.Wave):
		step.Hold = fmt.Sprintf("the analysis of the wave %s is asked next", strings.Join(as.Wave, ", "))
	default:
		// Judged at the evaluation's time: only an evaluation made after
		// the bake ended passes the wave.
		jw := analysis.JudgeWave(as.Wave, bakeUntil, j.Result, j.Result.At, "spec.analysis.bakeTime")
		step.Hold = jw.Hold
		if jw.FailWave {
			// Nodes granted beside the wave still upgrading to its release
			// would, failed now, finish on it outside the failed wave, never
			// rolled back. They join it as they finish, and the next
			// evaluation fails the wave with them.
			step.Finishing = inFlight(*st, as.Wave, as.WaveVersion)
		}
		switch {
		case len(step.Finishing) > 0:
			step.Hold = fmt.Sprintf("analysis fails after the wave %s (%s): %s; waiting for %s to finish, to fail the wave with them",
				strings.Join(as.Wave, ", "), as.WaveVersion, j.Result.Reason(), strings.Join(step.Finishing, ", "))
		case jw.FailWave:
			cause, _ := j.Result.Cause()
			as.Failed = &v1.AnalysisFailure{Query: cause.Query, Expr: cause.Expr, Value: cause.Value, Reason: j.Result.Reason(),
				Nodes: slices.Clone(as.Wave), Version: as.WaveVersion, At: metav1.Time{Time: now}}
			step.Failed, step.Hold = as.Failed, FailureMessage(*as.Failed)
		case jw.PassWave:
			step.Passed = as.Wave
			as.Wave, as.WaveVersion, as.BakeUntil, as.Previous = nil, "", nil, nil
		}
	}
	setAnalysisConditions(st, step, j, generation)
	return step
}

// inFlight are the nodes outside wave holding an upgrade slot (not a
// rollback's) to version in st: granted, not finished.
func inFlight(st v1.UpdateChannelStatus, wave []string, version string) []string {
	var out []string
	for _, sl := range st.Updating {
		if !sl.Rollback && sl.Version == version && !slices.Contains(wave, sl.Node) {
			out = append(out, sl.Node)
		}
	}
	return out
}

// FailureMessage says what failed, on which nodes, and what ends the halt.
func FailureMessage(f v1.AnalysisFailure) string {
	v := f.Version
	if v == "" {
		v = "the target"
	}
	return fmt.Sprintf("analysis failed after the wave %s (%s): %s; no node gets a slot until the target version changes (or the channel is resumed: annotate it %s=<a new token>)",
		strings.Join(f.Nodes, ", "), v, f.Reason, ResumeAnnotation)
}

func setAnalysisConditions(st *v1.UpdateChannelStatus, step AnalysisStep, j *Judged, generation int64) {
	failed := metav1.Condition{Type: v1.ConditionAnalysisFailed, Status: metav1.ConditionFalse, Reason: "NotFailed",
		Message: "no analysis failed for this release", ObservedGeneration: generation}
	if f := st.Analysis.Failed; f != nil {
		failed.Status, failed.Reason, failed.Message = metav1.ConditionTrue, "QueryFailed", FailureMessage(*f)
	}
	meta.SetStatusCondition(&st.Conditions, failed)
	holding := metav1.Condition{Type: v1.ConditionAnalysisHolding, Status: metav1.ConditionFalse, Reason: "Passing",
		Message: "the analysis passes: slots are granted", ObservedGeneration: generation}
	switch {
	case st.Analysis.Failed != nil:
		holding.Reason, holding.Message = "Failed", "the analysis failed (AnalysisFailed)"
	case j == nil:
		holding.Reason, holding.Message = "Idle", "nothing to judge: no wave and no node behind"
	case step.Hold != "":
		holding.Status, holding.Message = metav1.ConditionTrue, step.Hold
		switch {
		case len(step.Finishing) > 0:
			holding.Reason = "WaveFinishing" // failing; its late nodes first
		case !slices.Equal(j.Wave, st.Analysis.Wave):
			holding.Reason = "Judging" // a new wave, asked next
		case j.Result.Verdict != analysis.Pass:
			holding.Reason = "CannotJudge"
		case st.Analysis.BakeUntil != nil:
			holding.Reason = "Baking"
		default:
			holding.Reason = "Judging"
		}
	}
	meta.SetStatusCondition(&st.Conditions, holding)
}

// AnalysisNext is how soon the analysis wants the next pass: at the bake's
// end, else at its interval while a wave waits or nodes are behind (0:
// not needed).
func AnalysisNext(a *Analysis, as *v1.AnalysisStatus, behind bool, now time.Time) time.Duration {
	if a == nil || (as != nil && as.Failed != nil) {
		return 0
	}
	wave := as != nil && len(as.Wave) > 0
	if !wave && !behind {
		return 0
	}
	next := a.Interval
	if as != nil && as.BakeUntil != nil && as.BakeUntil.After(now) {
		next = min(next, as.BakeUntil.Sub(now)+10*time.Millisecond)
	}
	return next
}

// bakeEnd is when a bake of length bake started at now ends, rounded up to
// the whole second: the status keeps seconds, and a bake cut short by the
// rounding would let the next slot in before its length.
func bakeEnd(now time.Time, bake time.Duration) time.Time {
	end := now.Add(bake)
	if t := end.Truncate(time.Second); t.Before(end) {
		return t.Add(time.Second)
	}
	return end
}
