package analysis_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"slipway.dev/slipway/ops/analysis"
	"slipway.dev/slipway/ops/analysis/promtest"
)

// TestAgainstARealPrometheus judges a stand-in workload through a real
// Prometheus scraping it: its error rate under the threshold passes, over
// it fails (naming the node's series), a query Prometheus refuses and a
// query with no data hold, an active alert holds unless kured's filter
// ignores it, and a Prometheus stopped holds.
func TestAgainstARealPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the Prometheus server is a built tool")
	}
	var mu sync.Mutex
	rates := map[string]float64{"n1": 0, "n2": 0}
	exp := promtest.StartExporter(t, []string{"n1", "n2"}, func(n string) float64 { mu.Lock(); defer mu.Unlock(); return rates[n] })
	prom := promtest.Start(t, promtest.Options{Targets: []string{exp.Addr},
		Rules: "groups:\n- name: standin\n  rules:\n  - alert: StandinErrors\n    expr: sum(rate(standin_requests_total{code=\"500\"}[5s])) > 0\n"})
	q, err := analysis.NewClient(prom.URL)
	if err != nil {
		t.Fatal(err)
	}
	spec := analysis.Spec{Timeout: 10 * time.Second, Queries: []analysis.Query{
		{Name: "error-rate", Condition: "< 0.05",
			Expr: `sum by (node) (rate(standin_requests_total{code="500",node=~"$nodes"}[5s])) / sum by (node) (rate(standin_requests_total{node=~"$nodes"}[5s]))`},
	}}
	eventually := func(what string, spec analysis.Spec, want analysis.Verdict, reason string) analysis.Result {
		t.Helper()
		var r analysis.Result
		deadline := time.Now().Add(2 * time.Minute) // a deadline for a stuck test
		for {
			r = analysis.Evaluate(context.Background(), q, spec, []string{"n1", "n2"}, time.Now())
			if r.Verdict == want && strings.Contains(r.Reason(), reason) {
				return r
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s %q, want %s with %q", what, r.Verdict, r.Reason(), want, reason)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	eventually("healthy", spec, analysis.Pass, "")
	mu.Lock()
	rates["n2"] = 0.5
	mu.Unlock()
	r := eventually("n2 failing", spec, analysis.Fail, `node="n2"`)
	t.Logf("failed as expected: %s", r.Reason())

	bad := analysis.Spec{Queries: []analysis.Query{{Name: "typo", Expr: "sum(rate(x[5s]", Condition: "< 1"}}}
	eventually("a query Prometheus refuses", bad, analysis.Hold, "could not be evaluated")
	none := analysis.Spec{Queries: []analysis.Query{{Name: "absent", Expr: "no_such_metric", Condition: "< 1"}}}
	eventually("no data", none, analysis.Hold, "returned no data")
	rangeQ := analysis.Spec{Queries: []analysis.Query{{Name: "range", Expr: "standin_requests_total[5s]", Condition: "< 1"}}}
	eventually("a range result", rangeQ, analysis.Hold, "not an instant vector")

	alerts := analysis.Spec{Alerts: analysis.Alerts{Enabled: true}}
	eventually("an active alert", alerts, analysis.Hold, "StandinErrors")
	alerts.Alerts.Filter = regexp.MustCompile("^StandinErrors$")
	eventually("the alert ignored (--alert-filter-regexp)", alerts, analysis.Pass, "")

	// Prometheus gone: held, never passed.
	down, err := analysis.NewClient(fmt.Sprintf("http://%s", promtest.FreeAddr(t)))
	if err != nil {
		t.Fatal(err)
	}
	if r := analysis.Evaluate(context.Background(), down, spec, nil, time.Now()); r.Verdict != analysis.Hold {
		t.Fatalf("Prometheus down: %+v", r)
	}
}
