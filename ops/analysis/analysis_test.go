package analysis

import (
	"context"
	"errors"
	"math"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestParseCondition(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Condition
		err  string
	}{
		{in: "< 0.05", want: Condition{Op: OpLess, Threshold: 0.05}},
		{in: "<=1", want: Condition{Op: OpLessEq, Threshold: 1}},
		{in: " > 100 ", want: Condition{Op: OpGreater, Threshold: 100}},
		{in: ">= -2", want: Condition{Op: OpGreaterEq, Threshold: -2}},
		{in: "== 0", want: Condition{Op: OpEqual}},
		{in: "!= 0", want: Condition{Op: OpNotEqual}},
		{in: "empty", want: Condition{Op: OpEmpty}},
		{in: "Empty", want: Condition{Op: OpEmpty}},
		{in: "< abc", err: "is not a number"},
		{in: "< NaN", err: "is not a number"},
		{in: "~ 1", err: "write \"<op> <number>\""},
		{in: "", err: "write \"<op> <number>\""},
	} {
		got, err := ParseCondition(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want one with %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

func TestConditionHolds(t *testing.T) {
	for _, c := range []struct {
		cond string
		v    float64
		want bool
	}{
		{"< 0.05", 0.01, true}, {"< 0.05", 0.05, false}, {"<= 0.05", 0.05, true},
		{"> 1", 2, true}, {"> 1", 1, false}, {">= 1", 1, true},
		{"== 0", 0, true}, {"== 0", 1, false}, {"!= 0", 1, true},
		{"< 1", math.NaN(), false}, {"!= 1", math.NaN(), false},
		{"< 1", math.Inf(-1), true}, {"< 1", math.Inf(1), false},
	} {
		cond, err := ParseCondition(c.cond)
		if err != nil {
			t.Fatal(err)
		}
		if got := cond.Holds(c.v); got != c.want {
			t.Errorf("%s holds for %v: %v, want %v", c.cond, c.v, got, c.want)
		}
	}
}

func TestJudgeQuery(t *testing.T) {
	rate := Query{Name: "error-rate", Expr: "x", Condition: "< 0.05"}
	empty := Query{Name: "crash", Expr: "y", Condition: "empty"}
	one := func(v float64) []Sample { return []Sample{{Labels: map[string]string{"node": "n1"}, Value: v}} }
	for _, c := range []struct {
		name    string
		q       Query
		samples []Sample
		err     error
		want    Verdict
		reason  string
	}{
		{name: "under the threshold", q: rate, samples: one(0.01), want: Pass},
		{name: "over the threshold", q: rate, samples: one(0.5), want: Fail, reason: "error-rate = 0.5"},
		{name: "one series of several over", q: rate, samples: append(one(0.01), Sample{Labels: map[string]string{"node": "n2"}, Value: 0.2}), want: Fail, reason: `node="n2"`},
		{name: "no data holds", q: rate, want: Hold, reason: "no data"},
		{name: "no data passes when told", q: Query{Name: "r", Expr: "x", Condition: "< 1", NoData: "pass"}, want: Pass},
		{name: "NaN holds", q: rate, samples: one(math.NaN()), want: Hold, reason: "NaN"},
		{name: "NaN beside a failure holds", q: rate, samples: append(one(math.NaN()), one(1)...), want: Hold},
		{name: "query error holds", q: rate, err: errors.New("bad_data: parse error"), want: Hold, reason: "could not be evaluated: bad_data"},
		{name: "Prometheus down holds", q: empty, err: errors.New("connection refused"), want: Hold, reason: "connection refused"},
		{name: "empty and empty", q: empty, want: Pass},
		{name: "empty but a series", q: empty, samples: one(1), want: Fail, reason: "must return nothing, but returned 1 series"},
		{name: "bad condition holds", q: Query{Name: "b", Expr: "x", Condition: "about 3"}, samples: one(3), want: Hold},
		{name: "scalar", q: rate, samples: []Sample{{Value: 0.04}}, want: Pass},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := JudgeQuery(c.q, c.q.Expr, c.samples, c.err)
			if f.Verdict != c.want || !strings.Contains(f.Reason, c.reason) {
				t.Fatalf("%+v; want %s with a reason containing %q", f, c.want, c.reason)
			}
			if f.Query != c.q.Name || f.Expr != c.q.Expr {
				t.Fatalf("finding names %q (%q), want %q (%q)", f.Query, f.Expr, c.q.Name, c.q.Expr)
			}
		})
	}
}

func TestAlertsBlocks(t *testing.T) {
	ignore := regexp.MustCompile("^(Watchdog|InfoInhibitor)$")
	for _, c := range []struct {
		name        string
		a           Alerts
		alert, stat string
		want        bool
	}{
		{"no filter: every active alert", Alerts{}, "NodeDown", "pending", true},
		{"the filter ignores a match (kured's meaning)", Alerts{Filter: ignore}, "Watchdog", "firing", false},
		{"the filter leaves others", Alerts{Filter: ignore}, "NodeDown", "firing", true},
		{"match-only: only matches block", Alerts{Filter: ignore, MatchOnly: true}, "Watchdog", "firing", true},
		{"match-only: others do not", Alerts{Filter: ignore, MatchOnly: true}, "NodeDown", "firing", false},
		{"firing-only: pending does not", Alerts{FiringOnly: true}, "NodeDown", "pending", false},
		{"firing-only: firing does", Alerts{FiringOnly: true}, "NodeDown", "firing", true},
	} {
		if got := c.a.Blocks(c.alert, c.stat); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestJudgeAlerts(t *testing.T) {
	alert := func(name, state string) Sample {
		return Sample{Labels: map[string]string{"alertname": name, "alertstate": state}, Value: 1}
	}
	a := Alerts{Enabled: true, Filter: regexp.MustCompile("Watchdog"), FiringOnly: true}
	for _, c := range []struct {
		name   string
		series []Sample
		err    error
		want   Verdict
		value  string
	}{
		{name: "none", want: Pass},
		{name: "ignored and pending only", series: []Sample{alert("Watchdog", "firing"), alert("X", "pending")}, want: Pass},
		{name: "a firing alert holds", series: []Sample{alert("Watchdog", "firing"), alert("NodeDown", "firing"), alert("NodeDown", "firing")}, want: Hold, value: "NodeDown"},
		{name: "names sorted", series: []Sample{alert("B", "firing"), alert("A", "firing")}, want: Hold, value: "A, B"},
		{name: "value 0 is not active", series: []Sample{{Labels: map[string]string{"alertname": "Z", "alertstate": "firing"}}}, want: Pass},
		{name: "unreadable holds", err: errors.New("503"), want: Hold},
	} {
		f := JudgeAlerts(a, c.series, c.err)
		if f.Verdict != c.want || f.Value != c.value {
			t.Errorf("%s: %+v; want %s %q", c.name, f, c.want, c.value)
		}
	}
}

func TestCombine(t *testing.T) {
	p, fl, h := Finding{Query: "p", Verdict: Pass}, Finding{Query: "f", Verdict: Fail, Reason: "f failed"}, Finding{Query: "h", Verdict: Hold, Reason: "h held"}
	for _, c := range []struct {
		name     string
		findings []Finding
		want     Verdict
		reason   string
	}{
		{"nothing passes", nil, Pass, ""},
		{"all pass", []Finding{p, p}, Pass, ""},
		{"a hold", []Finding{p, h}, Hold, "h held"},
		{"a failure beats a hold", []Finding{h, fl, p}, Fail, "f failed"},
	} {
		r := Combine(time.Unix(0, 0), c.findings)
		if r.Verdict != c.want || r.Reason() != c.reason {
			t.Errorf("%s: %s %q; want %s %q", c.name, r.Verdict, r.Reason(), c.want, c.reason)
		}
	}
}

func TestExpand(t *testing.T) {
	if got := Expand(`rate(x{node=~"$nodes"}[1m])`, []string{"a.b", "c"}); got != `rate(x{node=~"a\\.b|c"}[1m])` {
		t.Fatalf("got %s", got)
	}
	if got := Expand(`x{node=~"$nodes"}`, nil); got != `x{node=~"$^"}` {
		t.Fatalf("no node: got %s", got)
	}
}

func TestParseFile(t *testing.T) {
	s, err := ParseFile([]byte("timeout: 3s\nqueries:\n- name: e\n  query: up\n  condition: '> 0'\n"), "f")
	if err != nil || s.Timeout != 3*time.Second || len(s.Queries) != 1 || s.Queries[0].Expr != "up" {
		t.Fatalf("%+v %v", s, err)
	}
	for _, c := range []struct{ text, err string }{
		{"queries: []", "no queries"},
		{"queries:\n- name: e\n  query: up\n  condition: big\n", `query "e": condition "big"`},
		{"queries:\n- query: up\n  condition: empty\n", "no name"},
		{"queries:\n- name: a\n  query: up\n  condition: empty\n- name: a\n  query: up\n  condition: empty\n", "used twice"},
		{"queries:\n- name: a\n  condition: empty\n", "no PromQL expression"},
		{"queries:\n- name: a\n  query: up\n  condition: empty\n  threshold: 3\n", "unknown field"},
		{"timeout: soon\nqueries:\n- name: a\n  query: up\n  condition: empty\n", "positive duration"},
	} {
		if _, err := ParseFile([]byte(c.text), "f"); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%q: error %v, want one with %q", c.text, err, c.err)
		}
	}
}

type stubQuerier struct {
	answers map[string][]Sample
	errs    map[string]error
	delay   time.Duration
	seen    []string
}

func (s *stubQuerier) Query(ctx context.Context, expr string, _ time.Time) ([]Sample, error) {
	s.seen = append(s.seen, expr)
	if s.delay > 0 {
		select {
		case <-time.After(s.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.answers[expr], s.errs[expr]
}

func TestEvaluate(t *testing.T) {
	spec := Spec{Queries: []Query{{Name: "rate", Expr: `r{node=~"$nodes"}`, Condition: "< 0.1"}}, Alerts: Alerts{Enabled: true}}
	q := &stubQuerier{answers: map[string][]Sample{`r{node=~"n1"}`: {{Value: 0.5}}}}
	r := Evaluate(context.Background(), q, spec, []string{"n1"}, time.Now())
	if r.Verdict != Fail || !strings.Contains(r.Reason(), "rate = 0.5") {
		t.Fatalf("%+v", r)
	}
	if len(q.seen) != 2 || q.seen[0] != "ALERTS" {
		t.Fatalf("queries run: %q", q.seen)
	}
	// A query that does not answer within the timeout holds.
	slow := &stubQuerier{delay: time.Minute}
	spec.Timeout = 50 * time.Millisecond
	if r := Evaluate(context.Background(), slow, spec, nil, time.Now()); r.Verdict != Hold || !strings.Contains(r.Reason(), "no answer within 50ms") {
		t.Fatalf("slow: %+v", r)
	}
	// No Prometheus at all holds.
	if r := Evaluate(context.Background(), nil, spec, nil, time.Now()); r.Verdict != Hold || !strings.Contains(r.Reason(), "--prometheus-url") {
		t.Fatalf("none: %+v", r)
	}
}

// TestPrometheusDownHolds: the real client, pointed at an address where
// nothing listens, holds with the connection's error.
func TestPrometheusDownHolds(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	q, err := NewClient("http://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	r := Evaluate(context.Background(), q, Spec{Queries: []Query{{Name: "up", Expr: "up", Condition: "> 0"}}, Timeout: 5 * time.Second}, nil, time.Now())
	if r.Verdict != Hold || !strings.Contains(r.Reason(), "connection refused") {
		t.Fatalf("%+v", r)
	}
}

func TestNewClientBadURL(t *testing.T) {
	for _, u := range []string{"", "localhost:9090", "ftp://x", "http://"} {
		if _, err := NewClient(u); err == nil || !strings.Contains(err.Error(), "http(s)://host:port") {
			t.Errorf("%q: %v", u, err)
		}
	}
}
