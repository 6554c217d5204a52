package plan

import (
	"strings"
	"testing"
	"time"

	"slipway.dev/slipway/ops/analysis"
)

func TestJudgeCanaryAnalysis(t *testing.T) {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	p := CanaryPolicy{Duration: 10 * time.Minute, NoRestartsDuration: time.Minute, AutoPause: true, PauseMaxRestarts: 2,
		AutoFail: true, FailMaxRestarts: 5, CanaryTimeout: 30 * time.Minute}
	due := start.Add(10 * time.Minute)
	ready := CanaryState{Start: start, Now: due.Add(time.Second), Expected: 1, Pods: []Health{{Ready: true}}}
	early := ready
	early.Now = start.Add(time.Minute)
	restarted := ready // a restart 9m30s in: due moves to 10m30s
	restarted.Pods = []Health{{Ready: true, Restarts: 1, LastRestart: start.Add(9*time.Minute + 30*time.Second)}}
	restarted.Now = start.Add(11 * time.Minute)
	res := func(v analysis.Verdict, at time.Time) *analysis.Result {
		f := analysis.Finding{Query: "error-rate", Verdict: v}
		switch v {
		case analysis.Fail:
			f.Value, f.Reason = "0.5", "query error-rate = 0.5 ({node=\"n1\"} 0.5), not < 0.05"
		case analysis.Hold:
			f.Reason = "query error-rate could not be evaluated: connection refused"
		}
		r := analysis.Combine(at, []analysis.Finding{f})
		return &r
	}
	noAutoFail := p
	noAutoFail.AutoFail = false
	tests := []struct {
		name        string
		p           CanaryPolicy
		s           CanaryState
		r           *analysis.Result
		want        Action
		reason      string
		hold        string // substring of the hold ("" none)
		cannotJudge bool
	}{
		{"pass after due validates", p, ready, res(analysis.Pass, due), Validate, ReasonValidated, "", false},
		{"pass made before due holds", p, ready, res(analysis.Pass, due.Add(-time.Second)), Continue, "", "made after", false},
		{"not asked yet at due holds", p, ready, nil, Continue, "", "not been asked", false},
		{"hold at due holds, never validates", p, ready, res(analysis.Hold, due.Add(time.Second)), Continue, "", "cannot be judged: query error-rate could not be evaluated", true},
		{"fail fails the canary", p, ready, res(analysis.Fail, due), Fail, ReasonAnalysisFailed, "", false},
		{"fail early fails the canary", p, early, res(analysis.Fail, early.Now), Fail, ReasonAnalysisFailed, "", false},
		{"fail without autoFail pauses", noAutoFail, early, res(analysis.Fail, early.Now), Pause, ReasonAnalysisFailed, "", false},
		{"pass early goes on", p, early, res(analysis.Pass, early.Now), Continue, "", "", false},
		{"hold early goes on with a reason", p, early, res(analysis.Hold, early.Now), Continue, "", "cannot be judged", true},
		{"a restart moves due: a pass before it holds", p, restarted, res(analysis.Pass, start.Add(10*time.Minute+10*time.Second)), Continue, "", "made after", false},
		{"a restart moves due: a pass after it validates", p, restarted, res(analysis.Pass, start.Add(10*time.Minute+30*time.Second)), Validate, ReasonValidated, "", false},
		{"manual fail stands over a pass", p, withManual(ready, func(s *CanaryState) { s.ManuallyFailed = true }), res(analysis.Pass, due), Fail, ReasonManuallyFailed, "", false},
		{"manual validation stands over a hold", p, withManual(ready, func(s *CanaryState) { s.Validated = true }), res(analysis.Hold, due), Validate, ReasonManuallyValidated, "", false},
		{"manual validation stands over a failure", p, withManual(ready, func(s *CanaryState) { s.Validated = true }), res(analysis.Fail, due), Validate, ReasonManuallyValidated, "", false},
		{"timeout fails a canary held too long", p, withManual(ready, func(s *CanaryState) { s.Now = start.Add(31 * time.Minute) }), res(analysis.Hold, start.Add(31*time.Minute)), Fail, ReasonTimeoutExceeded, "", false},
		{"a paused canary that fails its analysis fails", p, withManual(early, func(s *CanaryState) { s.ManuallyPaused = true }), res(analysis.Fail, early.Now), Fail, ReasonAnalysisFailed, "", false},
		{"a paused canary stays paused on a hold", p, withManual(early, func(s *CanaryState) { s.ManuallyPaused = true }), res(analysis.Hold, early.Now), Pause, ReasonManuallyPaused, "cannot be judged", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := CanaryVerdict(tt.p, tt.s)
			j := JudgeCanaryAnalysis(tt.p, tt.s, v, tt.r)
			if j.Verdict.Action != tt.want || j.Verdict.Reason != tt.reason {
				t.Errorf("verdict %s %q (from %s %q), want %s %q", j.Verdict.Action, j.Verdict.Reason, v.Action, v.Reason, tt.want, tt.reason)
			}
			if (tt.hold == "") != (j.Hold == "") || !strings.Contains(j.Hold, tt.hold) {
				t.Errorf("hold %q, want one with %q", j.Hold, tt.hold)
			}
			if j.CannotJudge != tt.cannotJudge {
				t.Errorf("cannotJudge %v, want %v", j.CannotJudge, tt.cannotJudge)
			}
			if j.Hold != "" && j.Verdict.Action == Continue && j.Verdict.RecheckAfter <= 0 && tt.p.CanaryTimeout > 0 {
				t.Errorf("a held canary with a timeout has no recheck")
			}
		})
	}
}

func withManual(s CanaryState, edit func(*CanaryState)) CanaryState {
	edit(&s)
	return s
}
