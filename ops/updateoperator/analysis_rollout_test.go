package updateoperator

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/analysis"
	"slipway.dev/slipway/ops/analysis/promtest"
)

// errorRateQuery is the stand-in workload's error rate over every node.
const errorRateQuery = `sum(rate(standin_requests_total{code="500"}[5s])) / sum(rate(standin_requests_total[5s]))`

// analysedFleet is a fleet whose stand-in workload a real Prometheus
// scrapes: the workload fails half its requests on node bad once that
// node's host runs v2 ("" : never).
func analysedFleet(t *testing.T, name string, nodes int, bad string) (*fleet, *promtest.Server) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the Prometheus server is a built tool")
	}
	f := newFleetOn(t, env, name)
	for i := range nodes {
		f.addNode(fmt.Sprintf("%s-%d", name, i), i%2 == 1)
	}
	exp := promtest.StartExporter(t, f.nodes, func(node string) float64 {
		if node != bad {
			return 0
		}
		if v, err := f.plats[node].Version(context.Background()); err == nil && v == "v2" {
			return 0.5
		}
		return 0
	})
	return f, promtest.Start(t, promtest.Options{Targets: []string{exp.Addr}})
}

func (f *fleet) analysis(prom *promtest.Server, bake time.Duration) Analysis {
	q, err := analysis.NewClient(prom.URL)
	if err != nil {
		f.t.Fatal(err)
	}
	return Analysis{Querier: q, Bake: bake, Interval: time.Second,
		Spec: analysis.Spec{Timeout: 10 * time.Second, Queries: []analysis.Query{{Name: "error-rate", Expr: errorRateQuery, Condition: "< 0.05"}}}}
}

// starts records, polling the Nodes, when each node was first seen in an
// update (prepare-, perform- or reboot-update wanted) and when its update
// first finished.
type starts struct {
	mu               sync.Mutex
	started, finshed map[string]time.Time
}

func (f *fleet) recordStarts(ctx context.Context) *starts {
	s := &starts{started: map[string]time.Time{}, finshed: map[string]time.Time{}}
	go func() {
		for ctx.Err() == nil {
			list, err := f.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			now := time.Now()
			if err == nil {
				s.mu.Lock()
				for _, n := range list.Items {
					if !has(f.nodes, n.Name) {
						continue
					}
					v := f.keys.View(&n, "")
					// A short prepare may fall between two polls: any intent of an update counts.
					inflight := v.Wanted == IntentPrepare || v.Wanted == IntentPerform || v.Wanted == IntentReboot
					if _, ok := s.started[n.Name]; !ok && inflight {
						s.started[n.Name] = now
					}
					if _, ok := s.finshed[n.Name]; !ok && n.Annotations[f.keys.Key(KeyFinished)] != "" {
						s.finshed[n.Name] = now
					}
				}
				s.mu.Unlock()
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return s
}

func (s *starts) get() (started, finished map[string]time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	started, finished = map[string]time.Time{}, map[string]time.Time{}
	for k, v := range s.started {
		started[k] = v
	}
	for k, v := range s.finshed {
		finished[k] = v
	}
	return started, finished
}

// A release that raises the workload's error rate when node 1 runs it:
// node 0 passes its analysis, node 1's bake sees the errors, and the
// rollout halts within that wave. The failed analysis is said (an Event
// naming the query, its value and the wave's node; the gauge; `status`);
// nodes 2 and 3 never start, well past every bake and interval.
func TestAnalysisHaltsABadRelease(t *testing.T) {
	f, prom := analysedFleet(t, "anbad", 4, "anbad-1")
	metrics := freeLoopback(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := f.recordStarts(ctx)
	stop := f.controller(func(o *ControllerOptions) {
		o.Analysis = f.analysis(prom, 6*time.Second)
		o.Policy.PauseBetween = 0
		o.MetricsAddr = metrics
	})
	defer stop()
	eventually(t, 4*time.Minute, "the failed analysis said on the wave's node", func() (bool, string) {
		if started, _ := rec.get(); !started["anbad-2"].IsZero() || !started["anbad-3"].IsZero() {
			t.Fatalf("a node after anbad-1 started its update: the rollout went past the wave whose workload fails")
		}
		var reasons []string
		for _, e := range f.events("anbad-1") {
			reasons = append(reasons, e.Reason)
		}
		return f.eventCount("anbad-1", ReasonAnalysisFailed) > 0, fmt.Sprintf("Events of anbad-1: %v", reasons)
	})
	eventually(t, 10*time.Second, "the failed-analysis gauge", metricsSay(metrics, `slipway_update_operator_analysis_failed{query="error-rate",version="v2"} 1`))
	// Well past a bake and many intervals: nothing else moves.
	time.Sleep(15 * time.Second)
	started, _ := rec.get()
	for _, n := range []string{"anbad-2", "anbad-3"} {
		if _, ok := started[n]; ok {
			t.Errorf("%s started after the failed analysis of anbad-1's wave", n)
		}
		if v := f.version(n); v != "v1" {
			t.Errorf("%s runs %s, want v1", n, v)
		}
	}
	for _, n := range []string{"anbad-0", "anbad-1"} {
		if v := f.version(n); v != "v2" {
			t.Errorf("%s runs %s, want v2 (updated before the halt)", n, v)
		}
	}
	if f.eventCount("anbad-0", ReasonAnalysisFailed) > 0 {
		t.Errorf("anbad-0, whose wave passed, is named in the failed analysis")
	}
	if f.eventCount("anbad-0", ReasonAnalysisPassed) == 0 {
		t.Errorf("no %s Event on anbad-0", ReasonAnalysisPassed)
	}
	msg := f.eventMessage("anbad-1", ReasonAnalysisFailed)
	for _, want := range []string{"error-rate = 0.", "not < 0.05", "wave anbad-1 (v2)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the %s Event does not say %q: %s", ReasonAnalysisFailed, want, msg)
		}
	}
	var out bytes.Buffer
	if err := Status(context.Background(), StatusOptions{Config: f.env.Config, Prefix: f.prefix, Namespace: "default", Out: &out}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "HALTED: analysis failed after the wave anbad-1 (v2)") {
		t.Errorf("status does not say the analysis halted the rollout:\n%s", out.String())
	}
}

// The same rollout with a healthy release goes to the end; each bake adds
// its length between one node's end and the next's start, and the next
// starts once the bake is over.
func TestAnalysisHealthyReleaseBakesToTheEnd(t *testing.T) {
	f, prom := analysedFleet(t, "angood", 3, "")
	const bake = 4 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := f.recordStarts(ctx)
	stop := f.controller(func(o *ControllerOptions) {
		o.Analysis = f.analysis(prom, bake)
		o.Policy.PauseBetween = 0
	})
	defer stop()
	eventually(t, 5*time.Minute, "every node at v2", func() (bool, string) { return f.done() })
	eventually(t, 30*time.Second, "the poll saw every start and end", func() (bool, string) {
		started, finished := rec.get()
		return len(started) == len(f.nodes) && len(finished) == len(f.nodes), fmt.Sprintf("starts %v, ends %v", started, finished)
	})
	started, finished := rec.get()
	for _, n := range f.nodes {
		if started[n].IsZero() || finished[n].IsZero() {
			t.Fatalf("%s: start seen at %s, end at %s", n, started[n], finished[n])
		}
	}
	order := append([]string(nil), f.nodes...)
	sort.Slice(order, func(i, j int) bool { return started[order[i]].Before(started[order[j]]) })
	for i := 1; i < len(order); i++ {
		prev, next := order[i-1], order[i]
		gap := started[next].Sub(finished[prev])
		t.Logf("bake %s: %s finished, %s started %s later", bake, prev, next, gap.Round(10*time.Millisecond))
		// Each end is seen by a poll (100ms apart, each a LIST that a loaded
		// API server may answer late): a second of blur. Without the bake
		// the next node starts within a turn (well under a second).
		if gap < bake-time.Second {
			t.Errorf("%s started %s after %s finished, before its %s bake ended", next, gap, prev, bake)
		}
		if gap > bake+time.Minute { // a deadline for a bake that never ends, not a timing measure
			t.Errorf("%s started %s after %s finished: the bake of %s held it far longer", next, gap, prev, bake)
		}
	}
	// The last wave bakes too, and passes.
	last := order[len(order)-1]
	eventually(t, time.Minute, "the last wave passed its analysis", func() (bool, string) {
		n := f.eventCount(last, ReasonAnalysisPassed)
		return n == 1, fmt.Sprintf("%d %s Events on %s", n, ReasonAnalysisPassed, last)
	})
}

// events are the Events about node as it is now (its UID: a test run
// again creates its nodes again, under the same names), reason: message.
func (f *fleet) events(node string) []corev1.Event {
	uid := f.node(node).UID
	list, err := f.kube.CoreV1().Events(eventNamespace).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + node})
	if err != nil {
		f.t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.UID == uid {
			out = append(out, e)
		}
	}
	return out
}

// eventMessage is the message of the last Event of reason about node.
func (f *fleet) eventMessage(node, reason string) string {
	msg := ""
	for _, e := range f.events(node) {
		if e.Reason == reason {
			msg = e.Message
		}
	}
	return msg
}

func (f *fleet) eventCount(node, reason string) int {
	n := 0
	for _, e := range f.events(node) {
		if e.Reason == reason {
			n++
		}
	}
	return n
}
