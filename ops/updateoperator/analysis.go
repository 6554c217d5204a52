package updateoperator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"slipway.dev/slipway/ops/analysis"
)

// Analysis gates the rollout on the workloads' metrics (docs/analysis.md):
// before a node starts an update, and during a bake time after each node
// finishes, its queries and kured's alert gate are evaluated; a failure
// halts the rollout until an admin resumes it, and what cannot be
// evaluated holds it.
type Analysis struct {
	// Spec is the queries and the alert gate (an empty Spec gates nothing).
	Spec analysis.Spec
	// Querier asks the Prometheus (--prometheus-url); nil with queries or
	// alerts holds every start, with the reason.
	Querier analysis.Querier
	// Bake: after a node's update finishes, no node starts for this long;
	// the analysis must pass at its end (and a failure during it fails
	// the wave at once).
	Bake time.Duration
	// Interval: the analysis is asked at most this often (default 10s).
	Interval time.Duration
}

func (a Analysis) on() bool { return !a.Spec.Empty() }

// AnalysisFailure is a failed analysis, recorded in the fleet state: the
// rollout is halted until an admin resumes it.
type AnalysisFailure struct {
	Query   string    `json:"query"`
	Expr    string    `json:"expr,omitempty"`
	Value   string    `json:"value,omitempty"`
	Reason  string    `json:"reason"`
	Nodes   []string  `json:"nodes"`             // the failed wave
	Version string    `json:"version,omitempty"` // what the wave runs
	At      time.Time `json:"at"`
}

// Message says what failed, on which nodes, and what ends the halt.
func (a AnalysisFailure) Message() string {
	v := a.Version
	if v == "" {
		v = "the new version"
	}
	return fmt.Sprintf("analysis failed after the wave %s (%s): %s; the rollout is halted (no node starts) until an admin resumes it (`slipway update-operator resume`)",
		strings.Join(a.Nodes, ", "), v, a.Reason)
}

// Judgement is what one turn does with the analysis.
type Judgement struct {
	// Hold, when set, is why no node starts this turn.
	Hold string
	// FailWave: record the wave as failed (the rollout halts);
	// PassWave: the wave passed its analysis (it is forgotten).
	FailWave, PassWave bool
}

// JudgeWave decides from the fleet's wave (the nodes finished since the
// analysis last passed), its bake and the analysis's result r
// (analysis.JudgeWave). Pure.
func JudgeWave(f Fleet, r analysis.Result, now time.Time) Judgement {
	return Judgement(analysis.JudgeWave(f.Wave, f.BakeUntil, r, now, "--bake-time"))
}

// FreshAfter is the earliest evaluation time a judgement may use
// (analysis.FreshAfter).
func FreshAfter(f Fleet, interval time.Duration, now time.Time) time.Time {
	return analysis.FreshAfter(f.BakeUntil, interval, now)
}

// judge asks the analysis when it matters this turn (a wave to judge, or
// a node that would start) and returns the fleet with AnalysisHold set
// when no node may start. A failed wave is recorded (halting the rollout
// until a resume), said on each of its nodes and in the metrics.
func (c *controller) judge(ctx context.Context, f Fleet, views []NodeView, now time.Time) Fleet {
	a := c.o.Analysis
	if !a.on() {
		return f
	}
	if f.AnalysisFailed != nil {
		if !c.analysisResumed(ctx, f) {
			c.m.analysisFailed.Reset()
			c.m.analysisFailed.WithLabelValues(f.AnalysisFailed.Query, f.AnalysisFailed.Version).Set(1)
			f.AnalysisHold = f.AnalysisFailed.Message()
			return f
		}
		f = c.fleet.get()
	}
	c.m.analysisFailed.Reset()
	if len(f.Wave) == 0 {
		if start, _ := Starts(views, c.o.Policy, f, now); len(start) == 0 {
			c.m.analysisHolding.Set(0)
			return f // nothing to judge, no slot to grant
		}
	}
	r := c.evaluate(ctx, f.Wave, FreshAfter(f, c.analysisInterval(), now), now)
	j := JudgeWave(f, r, now)
	switch {
	case j.FailWave:
		cause, _ := r.Cause()
		fail := &AnalysisFailure{Query: cause.Query, Expr: cause.Expr, Value: cause.Value, Reason: r.Reason(), Nodes: append([]string(nil), f.Wave...),
			Version: f.WaveVersion, At: now}
		if err := c.fleet.update(ctx, func(s *Fleet) { s.AnalysisFailed = fail }, nil); err != nil {
			c.o.Log.Error("record the failed analysis", "err", err)
		}
		c.o.Log.Warn("analysis failed: rollout halted", "query", fail.Query, "value", fail.Value, "nodes", fail.Nodes)
		c.m.analysisFailed.WithLabelValues(fail.Query, fail.Version).Set(1)
		for _, n := range fail.Nodes {
			c.ev.emit(ctx, n, corev1.EventTypeWarning, ReasonAnalysisFailed, "%s", fail.Message())
		}
		j.Hold = fail.Message()
	case j.PassWave:
		wave := f.Wave
		if err := c.fleet.update(ctx, func(s *Fleet) { s.Wave, s.WaveVersion, s.BakeUntil = nil, "", time.Time{} }, nil); err != nil {
			c.o.Log.Error("record the passed analysis", "err", err)
		}
		for _, n := range wave {
			c.ev.emit(ctx, n, corev1.EventTypeNormal, ReasonAnalysisPassed, "analysis passed after the wave %s (%s)", strings.Join(wave, ", "), f.WaveVersion)
		}
		f = c.fleet.get()
	}
	if r.Verdict != analysis.Pass && !j.FailWave {
		c.m.analysisHolding.Set(1)
	} else {
		c.m.analysisHolding.Set(0)
	}
	if j.Hold != "" && j.Hold != c.lastHold {
		c.o.Log.Info("no node starts", "why", j.Hold)
	}
	c.lastHold = j.Hold
	f.AnalysisHold = j.Hold
	return f
}

// evaluate returns the analysis's result, asked again unless the last one
// was made after fresh.
func (c *controller) evaluate(ctx context.Context, wave []string, fresh, now time.Time) analysis.Result {
	if c.lastResult != nil && !c.lastResult.At.Before(fresh) && slices.Equal(c.lastWave, wave) {
		return *c.lastResult
	}
	a := c.o.Analysis
	r := analysis.Evaluate(ctx, a.Querier, a.Spec, wave, now)
	c.lastResult, c.lastWave = &r, append([]string(nil), wave...)
	c.m.analysisEvaluations.WithLabelValues(string(r.Verdict)).Inc()
	return r
}

func (c *controller) analysisInterval() time.Duration {
	if c.o.Analysis.Interval > 0 {
		return c.o.Analysis.Interval
	}
	return 10 * time.Second
}

// analysisResumed lifts a failed analysis's halt when an admin asked to
// (the resume annotation, as for the brake): the failure and its wave are
// forgotten, said on the wave's nodes.
func (c *controller) analysisResumed(ctx context.Context, f Fleet) bool {
	asked, err := c.fleet.resumeAsked(ctx, c.o.Resync)
	if err != nil {
		c.o.Log.Error("fleet state", "err", err)
	}
	if !asked {
		return false
	}
	err = c.fleet.update(ctx, func(s *Fleet) {
		s.AnalysisFailed, s.Wave, s.WaveVersion, s.BakeUntil = nil, nil, "", time.Time{}
	}, map[string]any{c.keys.Key(KeyResume): nil})
	if err != nil {
		c.o.Log.Error("resume the rollout", "err", err)
		return false
	}
	c.lastResult = nil
	for _, n := range f.AnalysisFailed.Nodes {
		c.ev.emit(ctx, n, corev1.EventTypeNormal, ReasonResumed, "rollout resumed by an admin after its failed analysis (%s)", f.AnalysisFailed.Query)
	}
	return true
}

// joinWave adds a node whose update finished to the wave the analysis
// judges next, and starts its bake (a bake under way starts again: every
// node of a wave bakes its full length).
func (c *controller) joinWave(f *Fleet, v NodeView, now time.Time) {
	a := c.o.Analysis
	if !a.on() {
		return
	}
	f.Wave = append(f.Wave, v.Name)
	if v.Current != "" {
		f.WaveVersion = v.Current
	}
	if a.Bake > 0 {
		f.BakeUntil = now.Add(a.Bake)
		time.AfterFunc(a.Bake, c.trigger) // the next turn at the bake's end, not a resync later
	}
}
