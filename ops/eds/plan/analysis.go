package plan

import (
	"fmt"
	"time"

	"slipway.dev/slipway/ops/analysis"
)

// AnalysisJudgement is what a canary's analysis adds to its verdict.
type AnalysisJudgement struct {
	Verdict Verdict
	// Hold, when set, is why the canary waits for its analysis (it could
	// not be judged, has not been asked yet, or has not passed since the
	// canary could be validated); "" when it does not.
	Hold string
	// CannotJudge: Hold comes from an analysis that could not be
	// evaluated (Prometheus down, a query error, no data, an alert).
	CannotJudge bool
}

// JudgeCanaryAnalysis combines the canary's verdict v (CanaryVerdict of p
// and s) with the latest evaluation r of its analysis (nil: not asked
// yet). Pure.
//   - A failure already decided (autoFail, `kubectl-eds canary fail`) and a
//     manual validation (a person's word) stand.
//   - An analysis that failed fails the canary with the reason
//     AnalysisFailed, as autoFail does; with autoFail disabled it pauses it.
//   - Otherwise the canary is never validated by time unless r passed and
//     was made at or after ValidationDue: an evaluation that could not be
//     judged, or an older one, holds it (it goes on as a canary, and
//     autoFail.canaryTimeout still ends a hold that lasts).
func JudgeCanaryAnalysis(p CanaryPolicy, s CanaryState, v Verdict, r *analysis.Result) AnalysisJudgement {
	if v.Action == Fail || v.Reason == ReasonManuallyValidated {
		return AnalysisJudgement{Verdict: v}
	}
	if r != nil && r.Verdict == analysis.Fail {
		if p.AutoFail {
			return AnalysisJudgement{Verdict: Verdict{Action: Fail, Reason: ReasonAnalysisFailed}}
		}
		return AnalysisJudgement{Verdict: Verdict{Action: Pause, Reason: ReasonAnalysisFailed, RecheckAfter: v.RecheckAfter}}
	}
	j := AnalysisJudgement{Verdict: v}
	switch {
	case r == nil:
		j.Hold = "the analysis has not been asked yet"
	case r.Verdict != analysis.Pass:
		j.Hold, j.CannotJudge = "the analysis cannot be judged: "+r.Reason(), true
	}
	if v.Action != Validate {
		return j
	}
	due := ValidationDue(p, s)
	if j.Hold == "" && r.At.Before(due) {
		j.Hold = fmt.Sprintf("waiting for an evaluation of the analysis made after %s, when the canary could be validated", due.UTC().Format(time.RFC3339))
	}
	if j.Hold != "" {
		j.Verdict = Verdict{Action: Continue, RecheckAfter: failDeadline(p, s)}
	}
	return j
}
