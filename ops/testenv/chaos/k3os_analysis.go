package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The k3os system's "analysis" variant: once the rollout started, the
// channel gets an analysis on a stand-in Prometheus (one query, a 3 s
// bake after each node, asked every second), and the Prometheus is down
// (every query a 503: the analysis cannot be evaluated) for
// k3osAnalysisDown from the first wave on. No slot may be granted while
// the channel's status says the analysis holds or a wave is not passed
// (analysis-gate); the rollout ends at v2.

const k3osAnalysisDown = 15 * time.Second

// startVariant sets up the run's variant once the rollout has started;
// stop ends it with the run.
func (s *k3os) startVariant(ctx context.Context, h *harness) (stop func(), err error) {
	switch h.o.Variant {
	case "":
		return func() {}, nil
	case "analysis":
	default:
		if start, ok := k3osVariants[h.o.Variant]; ok { // variants kept in files of their own
			return start(s, ctx, h)
		}
		return nil, fmt.Errorf("k3os: unknown variant %q (known: analysis, %s)", h.o.Variant, variantRollback)
	}
	return s.startAnalysis(ctx, analysisSpec{query: "sum(rate(app_errors_total[1m]))"}, func(ctx context.Context, prom *standInPrometheus) {
		s.analysisDown(ctx, h, prom)
	})
}

// analysisSpec is what a variant's analysis asks the stand-in Prometheus.
type analysisSpec struct {
	query string
	// onFailure is spec.analysis.onFailure ("": halt).
	onFailure string
	// value is the query's value at each ask (nil: 0).
	value func() float64
}

// startAnalysis starts a stand-in Prometheus answering a, gives the
// channel an analysis of a on it (a 3 s bake, asked every second), and
// runs run until stop.
func (s *k3os) startAnalysis(ctx context.Context, a analysisSpec, run func(context.Context, *standInPrometheus)) (stop func(), err error) {
	prom, err := startPrometheus()
	if err != nil {
		return nil, err
	}
	prom.value = a.value
	analysis := map[string]any{
		"prometheusURL": prom.URL(), "bakeTime": "3s", "interval": "1s",
		"queries": []map[string]string{{"name": "errors", "query": a.query, "condition": "< 1"}},
	}
	if a.onFailure != "" {
		analysis["onFailure"] = a.onFailure
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"analysis": analysis}})
	if _, err := s.oc.OpsV1().UpdateChannels(k3osNS).Patch(ctx, "default", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		prom.close()
		return nil, fmt.Errorf("give the channel its analysis: %w", err)
	}
	vctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(vctx, prom)
	}()
	return func() { cancel(); <-done; prom.close() }, nil
}

// analysisDown takes prom down for k3osAnalysisDown once the channel's
// status first holds a wave (a node finished: its bake began).
func (s *k3os) analysisDown(ctx context.Context, h *harness, prom *standInPrometheus) {
	for {
		ch, err := s.oc.OpsV1().UpdateChannels(k3osNS).Get(ctx, "default", metav1.GetOptions{})
		if err == nil && ch.Status.Analysis != nil && len(ch.Status.Analysis.Wave) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	prom.down.Store(true)
	h.logf("variant: the wave began: Prometheus down for %s (%d queries so far)", k3osAnalysisDown, prom.queries.Load())
	select {
	case <-ctx.Done():
	case <-time.After(k3osAnalysisDown):
	}
	prom.down.Store(false)
	h.logf("variant: Prometheus back (%d queries so far)", prom.queries.Load())
}
