package controller

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/analysis/promtest"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/upgrade/layout"
)

// errorRateQuery is the stand-in workload's error rate over every node.
const errorRateQuery = `sum(rate(standin_requests_total{code="500"}[5s])) / sum(rate(standin_requests_total[5s]))`

// analysedFleet is a fleet of nodes whose stand-in workload a real
// Prometheus scrapes: the workload fails half its requests on node n<bad>
// once that node runs v2 (-1: never). Its agents are started.
func analysedFleet(t *testing.T, nodes, bad int, edit func(*Options)) (*fleet, *promtest.Server) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the Prometheus server is a built tool")
	}
	f := newFleet(t, nodes, edit)
	var names []string
	for i := range nodes {
		names = append(names, fmt.Sprintf("%s-n%d", f.NS, i))
	}
	exp := promtest.StartExporter(t, names, func(node string) float64 {
		if bad < 0 || node != names[bad] {
			return 0
		}
		if v, err := layout.New(f.SystemDir(node)).Current(layout.Rootfs); err == nil && v == "v2" {
			return 0.5
		}
		return 0
	})
	prom := promtest.Start(t, promtest.Options{Targets: []string{exp.Addr}})
	for _, n := range names {
		f.Start(n)
	}
	return f, prom
}

// analysedChannel is a channel to v2 one node at a time, gated by the
// stand-in workload's error rate.
func (f *fleet) analysedChannel(prom *promtest.Server, bake time.Duration) {
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", Concurrency: 1, RebootDelay: fleettest.ZeroDelay(),
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS}},
		Analysis: &v1.AnalysisSpec{PrometheusURL: prom.URL, BakeTime: &metav1.Duration{Duration: bake}, Interval: &metav1.Duration{Duration: time.Second},
			Queries: []v1.AnalysisQuery{{Name: "error-rate", Query: errorRateQuery, Condition: "< 0.05"}}}})
}

// slotOrder records, polling the channel, the order in which nodes were
// first seen holding a slot.
type slotOrder struct {
	mu    sync.Mutex
	order []string
	// granted and freed are when each node's slot was first seen and
	// first seen gone.
	granted, freed map[string]time.Time
}

func (f *fleet) recordSlots(ctx context.Context) *slotOrder {
	s := &slotOrder{granted: map[string]time.Time{}, freed: map[string]time.Time{}}
	go func() {
		for ctx.Err() == nil {
			ch, err := f.Ops.OpsV1().UpdateChannels(f.NS).Get(ctx, "default", metav1.GetOptions{})
			now := time.Now()
			if err == nil {
				s.mu.Lock()
				holding := map[string]bool{}
				for _, sl := range ch.Status.Updating {
					holding[sl.Node] = true
					if !slices.Contains(s.order, sl.Node) {
						s.order = append(s.order, sl.Node)
						s.granted[sl.Node] = now
					}
				}
				for _, n := range s.order {
					if _, ok := s.freed[n]; !ok && !holding[n] {
						s.freed[n] = now
					}
				}
				s.mu.Unlock()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return s
}

// gaps are the times between one slot's end and the next slot's grant.
func (s *slotOrder) gaps() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []time.Duration
	for i := 1; i < len(s.order); i++ {
		out = append(out, s.granted[s.order[i]].Sub(s.freed[s.order[i-1]]))
	}
	return out
}

func (s *slotOrder) get() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.order)
}

// A release that raises the workload's error rate once node n1 runs it:
// the bake after n1's upgrade sees the errors, the wave n1 fails, and the
// rollout stops there: no node gets a slot after n1, the status and a
// Warning Event name the query, its value and the wave, and the failure
// survives a restart of the controller.
func TestAnalysisStopsABadReleaseWithinItsWave(t *testing.T) {
	t.Parallel() // its own fleet: namespace, nodes, controller, Prometheus and exporter
	metrics := promtest.FreeAddr(t)
	f, prom := analysedFleet(t, 4, 1, func(o *Options) { o.MetricsAddr = metrics })
	bad := f.NS + "-n1"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slots := f.recordSlots(ctx)
	f.analysedChannel(prom, 5*time.Second)
	ch := f.WaitFor("the analysis failed", 4*time.Minute, func(ch *v1.UpdateChannel) bool {
		return fleettest.IsTrue(ch, v1.ConditionAnalysisFailed)
	})
	fail := ch.Status.Analysis.Failed
	if fail.Query != "error-rate" || !slices.Equal(fail.Nodes, []string{bad}) || fail.Version != "v2" || !strings.HasPrefix(fail.Value, "0.") {
		t.Errorf("status.analysis.failed = %+v, want error-rate failing after the wave %s (v2) with its value", fail, bad)
	}
	c := meta.FindStatusCondition(ch.Status.Conditions, v1.ConditionAnalysisFailed)
	for _, want := range []string{"error-rate = 0.", "not < 0.05", "wave " + bad + " (v2)"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("the AnalysisFailed condition does not say %q: %s", want, c.Message)
		}
	}
	if n := f.Events(ReasonAnalysisFailed, 1); n != 1 {
		t.Errorf("%d %s Events, want 1", n, ReasonAnalysisFailed)
	}
	// The controller restarts; well past the bake and many intervals,
	// nothing moves: the failure is in the status.
	f.StopController()
	f.StartController()
	f.Holds("no slot after the failed wave", 15*time.Second, func(ch *v1.UpdateChannel) bool {
		return len(ch.Status.Updating) == 0 && fleettest.IsTrue(ch, v1.ConditionAnalysisFailed)
	})
	gauge := `slipway_channel_analysis_failed{channel="default",query="error-rate",version="v2"} 1`
	if !metricSays(t, "http://"+metrics+"/metrics", gauge, 30*time.Second) {
		t.Errorf("the restarted controller's /metrics does not say %s", gauge)
	}
	order := slots.get()
	if len(order) == 0 || order[len(order)-1] != bad {
		t.Fatalf("slots were granted in the order %v: a node got one after the failed wave %s", order, bad)
	}
	for i := range 4 {
		n := fmt.Sprintf("%s-n%d", f.NS, i)
		want := "v1"
		if slices.Contains(order, n) {
			want = "v2"
		}
		if v := f.Current(n); v != want {
			t.Errorf("%s runs %s, want %s (slots in order %v)", n, v, want, order)
		}
	}
}

// The same rollout with a healthy release goes to the end, each wave
// passing its analysis after its bake: no slot is granted before the
// previous node's bake is over (the gaps are logged as the figure of what
// a bake adds).
func TestAnalysisHealthyReleaseCompletes(t *testing.T) {
	t.Parallel() // its own fleet: namespace, nodes, controller, Prometheus and exporter
	f, prom := analysedFleet(t, 3, -1, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slots := f.recordSlots(ctx)
	const bake = 2 * time.Second
	f.analysedChannel(prom, bake)
	ch := f.WaitFor("all nodes at v2", 4*time.Minute, fleettest.Done(3))
	gaps := slots.gaps()
	t.Logf("bake %s: from one slot's end to the next grant: %v (slots in order %v)", bake, gaps, slots.get())
	for _, g := range gaps {
		if g < bake-200*time.Millisecond { // the status polls' jitter
			t.Errorf("a slot was granted %s after the previous one ended, within its %s bake", g, bake)
		}
	}
	f.AssertAllAt("v2")
	if fleettest.IsTrue(ch, v1.ConditionAnalysisFailed) || ch.Status.Analysis == nil || ch.Status.Analysis.Failed != nil {
		t.Errorf("analysis status %+v, conditions %+v", ch.Status.Analysis, ch.Status.Conditions)
	}
	if n := f.EventsWithin(ReasonAnalysisPassed, 3, 30*time.Second); n < 3 {
		t.Errorf("%d %s Events, want one per wave (3)", n, ReasonAnalysisPassed)
	}
}

// An analysis that cannot be evaluated (nothing listens at its
// Prometheus's address) holds the rollout with its reason: no slot is
// granted, and nothing is recorded as the release's failure.
func TestAnalysisThatCannotBeEvaluatedHolds(t *testing.T) {
	t.Parallel() // its own fleet: namespace, nodes and controller
	f := newFleet(t, 2, nil)
	for i := range 2 {
		f.Start(fmt.Sprintf("%s-n%d", f.NS, i))
	}
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", Concurrency: 2, RebootDelay: fleettest.ZeroDelay(),
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS}},
		Analysis: &v1.AnalysisSpec{PrometheusURL: "http://" + promtest.FreeAddr(t), Interval: &metav1.Duration{Duration: time.Second},
			Queries: []v1.AnalysisQuery{{Name: "error-rate", Query: errorRateQuery, Condition: "< 0.05"}}}})
	ch := f.WaitFor("the analysis holds", 2*time.Minute, func(ch *v1.UpdateChannel) bool {
		return fleettest.IsTrue(ch, v1.ConditionAnalysisHolding)
	})
	c := meta.FindStatusCondition(ch.Status.Conditions, v1.ConditionAnalysisHolding)
	if c.Reason != "CannotJudge" || !strings.Contains(c.Message, "error-rate could not be evaluated") {
		t.Errorf("AnalysisHolding = %+v, want CannotJudge saying why", c)
	}
	f.Holds("no slot while the analysis cannot be evaluated", 10*time.Second, func(ch *v1.UpdateChannel) bool {
		return len(ch.Status.Updating) == 0 && !fleettest.IsTrue(ch, v1.ConditionAnalysisFailed)
	})
	f.AssertAllAt("v1")
}

// metricSays reports whether the metrics at url show line within wait.
func metricSays(t *testing.T, url, line string, wait time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(wait) // a deadline for a stuck wait, not a timing assertion
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), line) {
				return true
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return false
}
