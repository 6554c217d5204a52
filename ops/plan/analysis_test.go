package plan

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/analysis"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

func TestResolveAnalysis(t *testing.T) {
	q := []v1.AnalysisQuery{{Name: "errors", Query: "x", Condition: "< 0.05"}}
	for _, c := range []struct {
		name string
		spec *v1.AnalysisSpec
		bad  string // part of the Invalid message; "" valid
	}{
		{"none", nil, ""},
		{"queries", &v1.AnalysisSpec{PrometheusURL: "http://prom:9090", Queries: q}, ""},
		{"alerts only", &v1.AnalysisSpec{PrometheusURL: "https://prom", Alerts: &v1.AlertGate{FilterRegexp: "^Watchdog$"}}, ""},
		{"no scheme", &v1.AnalysisSpec{PrometheusURL: "prom:9090", Queries: q}, "http(s)://host:port"},
		{"nothing asked", &v1.AnalysisSpec{PrometheusURL: "http://prom"}, "asks nothing"},
		{"bad condition", &v1.AnalysisSpec{PrometheusURL: "http://prom", Queries: []v1.AnalysisQuery{{Name: "e", Query: "x", Condition: "below 1"}}}, `"< 0.05"`},
		{"bad filter", &v1.AnalysisSpec{PrometheusURL: "http://prom", Alerts: &v1.AlertGate{FilterRegexp: "("}}, "filterRegexp"},
		{"zero interval", &v1.AnalysisSpec{PrometheusURL: "http://prom", Queries: q, Interval: &metav1.Duration{}}, "interval"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, bad := ResolveAnalysis(c.spec)
			switch {
			case c.bad == "" && bad != nil:
				t.Fatalf("refused: %v", bad)
			case c.bad != "" && (bad == nil || bad.Reason != ReasonBadAnalysis || !strings.Contains(bad.Message, c.bad)):
				t.Fatalf("Invalid = %v, want one saying %q", bad, c.bad)
			case c.bad == "" && c.spec != nil && a.Interval != DefaultAnalysisInterval:
				t.Errorf("interval %s, want the default", a.Interval)
			}
		})
	}
}

func TestStepAnalysis(t *testing.T) {
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	a := &Analysis{URL: "http://prom", Bake: time.Minute, Interval: 10 * time.Second}
	pass := analysis.Combine(now, []analysis.Finding{{Query: "errors", Verdict: analysis.Pass}})
	fail := analysis.Combine(now, []analysis.Finding{{Query: "errors", Verdict: analysis.Fail, Value: "0.4", Reason: "query errors = 0.4, not < 0.05"}})
	hold := analysis.Combine(now, []analysis.Finding{analysis.JudgeQuery(analysis.Query{Name: "errors", Condition: "< 1"}, "x", nil, errors.New("connection refused"))})
	baking := func() *v1.AnalysisStatus {
		return &v1.AnalysisStatus{Wave: []string{"n1"}, WaveVersion: "v2", BakeUntil: &metav1.Time{Time: now.Add(30 * time.Second)}}
	}
	baked := func() *v1.AnalysisStatus {
		return &v1.AnalysisStatus{Wave: []string{"n1"}, WaveVersion: "v2", BakeUntil: &metav1.Time{Time: now.Add(-time.Second)}}
	}
	for _, c := range []struct {
		name      string
		a         *Analysis
		as        *v1.AnalysisStatus
		updating  []v1.Slot // the slots held in the pass
		succeeded []string
		target    string
		j         *Judged
		hold      string // part of Hold; "" grants
		failed    bool   // a failure recorded in this pass
		passed    bool
		holding   metav1.ConditionStatus
		reason    string   // of AnalysisHolding, when set
		wave      []string // the wave after the pass
	}{
		{name: "no analysis: nothing held", a: nil, target: "v2"},
		{name: "no wave, pass: slots granted", a: a, target: "v2", j: &Judged{Result: pass}, holding: metav1.ConditionFalse},
		{name: "no wave, fail: not the release's, held", a: a, target: "v2", j: &Judged{Result: fail}, hold: "no wave to blame", holding: metav1.ConditionTrue},
		{name: "no wave, cannot judge: held", a: a, target: "v2", j: &Judged{Result: hold}, hold: "connection refused", holding: metav1.ConditionTrue, reason: "CannotJudge"},
		{name: "not asked: held", a: a, target: "v2", hold: "not asked", holding: metav1.ConditionFalse},
		{name: "a node finishes: joins the wave, judged next", a: a, target: "v2", succeeded: []string{"n1"}, j: &Judged{Result: pass},
			hold: "the wave n1 is asked next", holding: metav1.ConditionTrue, reason: "Judging", wave: []string{"n1"}},
		{name: "baking, pass: held", a: a, as: baking(), target: "v2", j: &Judged{Result: pass, Wave: []string{"n1"}}, hold: "baking n1",
			holding: metav1.ConditionTrue, reason: "Baking", wave: []string{"n1"}},
		{name: "baking, fail: the wave fails at once", a: a, as: baking(), target: "v2", j: &Judged{Result: fail, Wave: []string{"n1"}},
			hold: "analysis failed after the wave n1 (v2)", failed: true, holding: metav1.ConditionFalse, wave: []string{"n1"}},
		{name: "baking, fail, a node granted beside the wave still upgrading: held, waiting for it", a: a, as: baking(), target: "v2",
			updating: []v1.Slot{{Node: "n0", Version: "v2", Phase: PhaseRebooting}}, j: &Judged{Result: fail, Wave: []string{"n1"}},
			hold: "waiting for n0 to finish", holding: metav1.ConditionTrue, reason: "WaveFinishing", wave: []string{"n1"}},
		{name: "baking, fail, only rollback slots and another release's held: the wave fails", a: a, as: baking(), target: "v2",
			updating: []v1.Slot{{Node: "n0", Version: "v1", Rollback: true}, {Node: "n2", Version: "v3"}}, j: &Judged{Result: fail, Wave: []string{"n1"}},
			hold: "analysis failed after the wave n1 (v2)", failed: true, holding: metav1.ConditionFalse, wave: []string{"n1"}},
		{name: "the late node finished: it joins the wave, which the next evaluation fails with it", a: a, as: baking(), target: "v2",
			succeeded: []string{"n0"}, j: &Judged{Result: fail, Wave: []string{"n1"}},
			hold: "the wave n1, n0 is asked next", holding: metav1.ConditionTrue, reason: "Judging", wave: []string{"n1", "n0"}},
		{name: "baked, pass: the wave passes", a: a, as: baked(), target: "v2", j: &Judged{Result: pass, Wave: []string{"n1"}}, passed: true,
			holding: metav1.ConditionFalse},
		{name: "baked, cannot judge: held", a: a, as: baked(), target: "v2", j: &Judged{Result: hold, Wave: []string{"n1"}}, hold: "cannot be judged",
			holding: metav1.ConditionTrue, wave: []string{"n1"}},
		{name: "failed: held whatever the result", a: a, target: "v2", j: &Judged{Result: pass},
			as:   &v1.AnalysisStatus{Failed: &v1.AnalysisFailure{Query: "errors", Nodes: []string{"n1"}, Version: "v2", Reason: "r"}},
			hold: "analysis failed after the wave n1", holding: metav1.ConditionFalse},
		{name: "failed for another version: forgotten", a: a, target: "v3", j: &Judged{Result: pass},
			as:      &v1.AnalysisStatus{Failed: &v1.AnalysisFailure{Query: "errors", Nodes: []string{"n1"}, Version: "v2", Reason: "r"}},
			holding: metav1.ConditionFalse},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := &v1.UpdateChannelStatus{Analysis: c.as, Updating: c.updating}
			step := StepAnalysis(c.a, st, c.succeeded, c.target, c.j, now, 1)
			if (c.hold == "") != (step.Hold == "") || !strings.Contains(step.Hold, c.hold) {
				t.Errorf("hold = %q, want one saying %q", step.Hold, c.hold)
			}
			if (step.Failed != nil) != c.failed || (len(step.Passed) > 0) != c.passed {
				t.Errorf("failed %+v passed %v, want failed %v passed %v", step.Failed, step.Passed, c.failed, c.passed)
			}
			if c.a == nil {
				if st.Analysis != nil || len(st.Conditions) > 0 {
					t.Errorf("status kept %+v %+v", st.Analysis, st.Conditions)
				}
				return
			}
			if got := st.Analysis.Wave; strings.Join(got, ",") != strings.Join(c.wave, ",") {
				t.Errorf("wave %v, want %v", got, c.wave)
			}
			if h := meta.FindStatusCondition(st.Conditions, v1.ConditionAnalysisHolding); h == nil || h.Status != c.holding || (c.reason != "" && h.Reason != c.reason) {
				t.Errorf("AnalysisHolding = %+v, want %s %s", h, c.holding, c.reason)
			}
			f := meta.FindStatusCondition(st.Conditions, v1.ConditionAnalysisFailed)
			if want := st.Analysis.Failed != nil; f == nil || (f.Status == metav1.ConditionTrue) != want {
				t.Errorf("AnalysisFailed = %+v, want true: %v", f, want)
			}
			if c.failed && (st.Analysis.Failed.Query != "errors" || st.Analysis.Failed.Value != "0.4" || st.Analysis.Failed.Nodes[0] != "n1") {
				t.Errorf("failure = %+v", st.Analysis.Failed)
			}
		})
	}
}

func TestAnalysisNext(t *testing.T) {
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	a := &Analysis{Interval: 10 * time.Second}
	for _, c := range []struct {
		name   string
		as     *v1.AnalysisStatus
		behind bool
		want   time.Duration
	}{
		{"nothing behind, no wave", nil, false, 0},
		{"behind", nil, true, 10 * time.Second},
		{"bake ends sooner", &v1.AnalysisStatus{Wave: []string{"n"}, BakeUntil: &metav1.Time{Time: now.Add(time.Second)}}, false, time.Second + 10*time.Millisecond},
		{"failed", &v1.AnalysisStatus{Failed: &v1.AnalysisFailure{}}, true, 0},
	} {
		if got := AnalysisNext(a, c.as, c.behind, now); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

func TestBakeEndRoundsUp(t *testing.T) {
	at := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct{ now, want time.Time }{
		{at, at.Add(2 * time.Second)},
		{at.Add(300 * time.Millisecond), at.Add(3 * time.Second)},
		{at.Add(999 * time.Millisecond), at.Add(3 * time.Second)},
	} {
		if got := bakeEnd(c.now, 2*time.Second); !got.Equal(c.want) {
			t.Errorf("bakeEnd(%s, 2s) = %s, want %s", c.now.Format(time.StampMilli), got.Format(time.StampMilli), c.want.Format(time.StampMilli))
		}
	}
}
