package updateoperator

import (
	"strings"
	"testing"
	"time"

	"slipway.dev/slipway/ops/analysis"
)

func TestJudgeWave(t *testing.T) {
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	pass := analysis.Result{Verdict: analysis.Pass}
	fail := analysis.Result{Verdict: analysis.Fail, Findings: []analysis.Finding{{Query: "errors", Verdict: analysis.Fail, Reason: "query errors = 0.5"}}}
	hold := analysis.Result{Verdict: analysis.Hold, Findings: []analysis.Finding{{Query: "errors", Verdict: analysis.Hold, Reason: "connection refused"}}}
	wave := Fleet{Wave: []string{"n1"}, WaveVersion: "v2"}
	baking := Fleet{Wave: []string{"n1"}, BakeUntil: now.Add(time.Minute)}
	baked := Fleet{Wave: []string{"n1"}, BakeUntil: now.Add(-time.Second)}
	for _, c := range []struct {
		name string
		f    Fleet
		r    analysis.Result
		want Judgement
		hold string
	}{
		{name: "no wave, pass: a slot may be granted", f: Fleet{}, r: pass, want: Judgement{}},
		{name: "no wave, fail: not the release's, held", f: Fleet{}, r: fail, hold: "no wave to blame"},
		{name: "no wave, cannot judge: held", f: Fleet{}, r: hold, hold: "cannot be judged, holding: connection refused"},
		{name: "a wave, fail: the wave fails", f: wave, r: fail, want: Judgement{FailWave: true}, hold: "query errors = 0.5"},
		{name: "a wave without bake, pass: the wave passes", f: wave, r: pass, want: Judgement{PassWave: true}},
		{name: "baking, pass: held until the bake ends", f: baking, r: pass, hold: "baking n1 until"},
		{name: "baking, fail: the wave fails at once", f: baking, r: fail, want: Judgement{FailWave: true}, hold: "analysis failed"},
		{name: "baking, cannot judge: held", f: baking, r: hold, hold: "cannot be judged"},
		{name: "baked, pass: the wave passes", f: baked, r: pass, want: Judgement{PassWave: true}},
		{name: "baked, cannot judge: held, never passed", f: baked, r: hold, hold: "cannot be judged"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := JudgeWave(c.f, c.r, now)
			if got.FailWave != c.want.FailWave || got.PassWave != c.want.PassWave || (c.hold == "") != (got.Hold == "") || !strings.Contains(got.Hold, c.hold) {
				t.Fatalf("%+v; want %+v with a hold containing %q", got, c.want, c.hold)
			}
		})
	}
}

func TestFreshAfter(t *testing.T) {
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		bake time.Time
		want time.Time
	}{
		{"no bake: within the interval", time.Time{}, now.Add(-10 * time.Second)},
		{"baking: within the interval", now.Add(time.Minute), now.Add(-10 * time.Second)},
		{"the bake just ended: made after its end", now.Add(-2 * time.Second), now.Add(-2 * time.Second)},
		{"the bake ended long ago: within the interval", now.Add(-time.Hour), now.Add(-10 * time.Second)},
	} {
		if got := FreshAfter(Fleet{BakeUntil: c.bake}, 10*time.Second, now); !got.Equal(c.want) {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// No node starts while the analysis holds, whatever else allows it; a
// failed analysis stops preparing ahead too.
func TestStartsWaitForTheAnalysis(t *testing.T) {
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	idle := NodeView{Name: "n1", Wanted: IntentStabilize, Active: IntentStabilize, State: StateUpdateAvailable, Ready: true, Available: "v2"}
	p := Policy{MaxConcurrent: 2, PrepareAhead: true}
	if start, _ := Starts([]NodeView{idle}, p, Fleet{}, now); len(start) != 1 {
		t.Fatalf("without a hold: %v", start)
	}
	start, why := Starts([]NodeView{idle}, p, Fleet{AnalysisHold: "baking n0"}, now)
	if len(start) != 0 || why != "baking n0" {
		t.Fatalf("held: %v %q", start, why)
	}
	if ahead := PrepareAhead([]NodeView{idle}, p, Fleet{AnalysisFailed: &AnalysisFailure{}}, now, nil); len(ahead) != 0 {
		t.Fatalf("prepared ahead after a failed analysis: %v", ahead)
	}
}
