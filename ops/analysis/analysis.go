// Package analysis judges a rollout by the metrics its workloads already
// export: named PromQL queries, each with a threshold ("< 0.05") or "must
// be empty", and kured's alert gate (the active alerts of a Prometheus,
// filtered by a regular expression), evaluated through the Prometheus HTTP
// query API. The verdict is Pass, Fail or Hold: whatever cannot be
// evaluated (Prometheus down, a query error, NaN, no data where a value is
// required) holds, with its reason, and never passes. One package serves
// every rollout that names an analysis: the update operator's waves, an
// UpdateChannel's slots and an EDS canary.
package analysis

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Verdict is what an analysis says of a rollout.
type Verdict string

// Verdicts. Fail and Hold both stop new slots; only Fail is the release's
// (its wave is failed, rolled back when asked); Hold lifts by itself once
// the analysis can be evaluated and passes.
const (
	Pass Verdict = "Pass"
	Fail Verdict = "Fail"
	Hold Verdict = "Hold"
)

// Op is a query's comparison.
type Op string

// Comparisons. OpEmpty: the query must return no series (an alert-like
// query: "pods crash-looping").
const (
	OpLess      Op = "<"
	OpLessEq    Op = "<="
	OpGreater   Op = ">"
	OpGreaterEq Op = ">="
	OpEqual     Op = "=="
	OpNotEqual  Op = "!="
	OpEmpty     Op = "empty"
)

// Query is one named PromQL query and what its result must be.
type Query struct {
	// Name names the query in status, Events and metrics.
	Name string `json:"name"`
	// Expr is the PromQL expression, evaluated as an instant query. The
	// text $nodes is replaced by the nodes of the wave judged, as a
	// regular expression (`node=~"$nodes"`).
	Expr string `json:"query"`
	// Condition is "<op> <number>" (op one of < <= > >= == !=), met by
	// every series of the result, or "empty".
	Condition string `json:"condition"`
	// NoData says what a threshold query returning no series means:
	// "hold" (the default: no data is not a pass) or "pass".
	NoData string `json:"noData,omitempty"`
}

// Condition is a parsed Query.Condition.
type Condition struct {
	Op        Op
	Threshold float64
}

// ParseCondition reads "< 0.05", ">=1", "== 0" or "empty".
func ParseCondition(s string) (Condition, error) {
	t := strings.TrimSpace(s)
	if strings.EqualFold(t, string(OpEmpty)) {
		return Condition{Op: OpEmpty}, nil
	}
	for _, op := range []Op{OpLessEq, OpGreaterEq, OpEqual, OpNotEqual, OpLess, OpGreater} { // two-character ones first
		rest, ok := strings.CutPrefix(t, string(op))
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil || math.IsNaN(v) {
			return Condition{}, fmt.Errorf("condition %q: %q is not a number (write e.g. \"< 0.05\")", s, strings.TrimSpace(rest))
		}
		return Condition{Op: op, Threshold: v}, nil
	}
	return Condition{}, fmt.Errorf("condition %q: write \"<op> <number>\" with op one of < <= > >= == != (e.g. \"< 0.05\"), or \"empty\"", s)
}

// Holds reports whether v meets the condition (never for NaN).
func (c Condition) Holds(v float64) bool {
	if math.IsNaN(v) {
		return false
	}
	switch c.Op {
	case OpLess:
		return v < c.Threshold
	case OpLessEq:
		return v <= c.Threshold
	case OpGreater:
		return v > c.Threshold
	case OpGreaterEq:
		return v >= c.Threshold
	case OpEqual:
		return v == c.Threshold
	case OpNotEqual:
		return v != c.Threshold
	}
	return false
}

func (c Condition) String() string {
	if c.Op == OpEmpty {
		return "empty"
	}
	return fmt.Sprintf("%s %s", c.Op, strconv.FormatFloat(c.Threshold, 'g', -1, 64))
}

// Alerts is kured's Prometheus gate, with kured's meaning: the alerts
// active in Prometheus (its ALERTS series, pending or firing) block,
// except those whose name Filter matches (--alert-filter-regexp: alerts
// to ignore); with MatchOnly (--alert-filter-match-only), only those it
// matches block; with FiringOnly (--alert-firing-only), pending alerts
// do not block.
type Alerts struct {
	Enabled    bool
	Filter     *regexp.Regexp
	MatchOnly  bool
	FiringOnly bool
}

// Blocks reports whether an active alert of this name and state
// ("pending", "firing") blocks.
func (a Alerts) Blocks(name, state string) bool {
	if a.FiringOnly && state != "firing" {
		return false
	}
	if a.Filter == nil {
		return true
	}
	return a.Filter.MatchString(name) == a.MatchOnly
}

// Spec is an analysis: its queries and its alert gate.
type Spec struct {
	Queries []Query
	Alerts  Alerts
	// Timeout bounds each query (default DefaultTimeout).
	Timeout time.Duration
}

// DefaultTimeout bounds one query when the analysis names none.
const DefaultTimeout = 10 * time.Second

// Empty reports whether there is nothing to evaluate (the rollout is not
// gated).
func (s Spec) Empty() bool { return len(s.Queries) == 0 && !s.Alerts.Enabled }

// Validate checks every query: a name (unique), an expression and a
// condition that parses.
func (s Spec) Validate() error {
	seen := map[string]bool{}
	for i, q := range s.Queries {
		switch {
		case strings.TrimSpace(q.Name) == "":
			return fmt.Errorf("query %d: no name (give each query a name: it is reported when the query fails)", i+1)
		case seen[q.Name]:
			return fmt.Errorf("query %q: the name is used twice (give each query its own)", q.Name)
		case strings.TrimSpace(q.Expr) == "":
			return fmt.Errorf("query %q: no PromQL expression (query:)", q.Name)
		}
		seen[q.Name] = true
		if _, err := ParseCondition(q.Condition); err != nil {
			return fmt.Errorf("query %q: %w", q.Name, err)
		}
		if q.NoData != "" && q.NoData != "hold" && q.NoData != "pass" {
			return fmt.Errorf("query %q: noData %q: write \"hold\" (the default) or \"pass\"", q.Name, q.NoData)
		}
	}
	return nil
}

// Sample is one series of a query's result: its labels and value.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// String is the series as PromQL prints it: {a="b"} 0.25.
func (s Sample) String() string {
	keys := make([]string, 0, len(s.Labels))
	for k := range s.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%q", k, s.Labels[k])
	}
	return "{" + strings.Join(parts, ",") + "} " + FormatValue(s.Value)
}

// FormatValue prints a value as status and Events show it.
func FormatValue(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }

// Finding is the verdict on one query (or on the alert gate).
type Finding struct {
	Query   string  `json:"query"`           // the query's name ("alerts" for the gate)
	Expr    string  `json:"expr,omitempty"`  // the expression evaluated
	Verdict Verdict `json:"verdict"`         // Pass, Fail or Hold
	Value   string  `json:"value,omitempty"` // the offending value (or series)
	Reason  string  `json:"reason,omitempty"`
}

// AlertsQuery names the alert gate's finding.
const AlertsQuery = "alerts"

// JudgeQuery is the verdict on query q given its result (samples: one per
// series; a scalar result is one sample without labels) or the error that
// kept it from being evaluated. Pure.
func JudgeQuery(q Query, expr string, samples []Sample, err error) Finding {
	f := Finding{Query: q.Name, Expr: expr}
	cond, perr := ParseCondition(q.Condition)
	switch {
	case perr != nil:
		f.Verdict, f.Reason = Hold, perr.Error()
		return f
	case err != nil:
		f.Verdict, f.Reason = Hold, fmt.Sprintf("query %s could not be evaluated: %v", q.Name, err)
		return f
	}
	if cond.Op == OpEmpty {
		if len(samples) == 0 {
			f.Verdict = Pass
			return f
		}
		f.Verdict, f.Value = Fail, samples[0].String()
		f.Reason = fmt.Sprintf("query %s must return nothing, but returned %d series (%s)", q.Name, len(samples), samples[0])
		return f
	}
	if len(samples) == 0 {
		if q.NoData == "pass" {
			f.Verdict = Pass
			return f
		}
		f.Verdict, f.Reason = Hold, fmt.Sprintf("query %s returned no data, so %s cannot be judged (noData: hold)", q.Name, cond)
		return f
	}
	for _, s := range samples {
		if math.IsNaN(s.Value) {
			f.Verdict, f.Value = Hold, s.String()
			f.Reason = fmt.Sprintf("query %s returned NaN (%s), so %s cannot be judged", q.Name, s, cond)
			return f
		}
	}
	for _, s := range samples {
		if !cond.Holds(s.Value) {
			f.Verdict, f.Value = Fail, FormatValue(s.Value)
			f.Reason = fmt.Sprintf("query %s = %s (%s), not %s", q.Name, FormatValue(s.Value), s, cond)
			return f
		}
	}
	f.Verdict, f.Value = Pass, FormatValue(samples[0].Value)
	return f
}

// JudgeAlerts is the verdict of kured's gate on the ALERTS series of
// Prometheus (each with labels alertname and alertstate, value 1 while
// active), or the error that kept them from being read. Blocking alerts
// hold the rollout, as they block kured's reboots; they do not fail the
// release. Pure.
func JudgeAlerts(a Alerts, series []Sample, err error) Finding {
	f := Finding{Query: AlertsQuery, Expr: "ALERTS"}
	if err != nil {
		f.Verdict, f.Reason = Hold, fmt.Sprintf("the active alerts could not be read: %v", err)
		return f
	}
	set := map[string]bool{}
	for _, s := range series {
		name, ok := s.Labels["alertname"]
		if !ok || s.Value == 0 {
			continue
		}
		if a.Blocks(name, s.Labels["alertstate"]) {
			set[name] = true
		}
	}
	if len(set) == 0 {
		f.Verdict = Pass
		return f
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	shown := names
	if len(shown) > 10 {
		shown = append(shown[:10:10], "...")
	}
	f.Verdict, f.Value = Hold, strings.Join(shown, ", ")
	f.Reason = fmt.Sprintf("%d alerts active: %s (--alert-filter-regexp ignores some, --alert-firing-only ignores pending ones)", len(names), f.Value)
	return f
}

// Result is the verdict of a whole analysis.
type Result struct {
	Verdict  Verdict   `json:"verdict"`
	Findings []Finding `json:"findings,omitempty"`
	At       time.Time `json:"at"`
}

// Combine is the verdict over findings: Fail if any query failed (a
// failure is known even when another query could not be evaluated), else
// Hold if any held, else Pass. Pure.
func Combine(at time.Time, findings []Finding) Result {
	r := Result{Verdict: Pass, Findings: findings, At: at}
	for _, f := range findings {
		switch {
		case f.Verdict == Fail:
			r.Verdict = Fail
		case f.Verdict != Pass && r.Verdict == Pass:
			r.Verdict = Hold
		}
	}
	return r
}

// Cause is the finding that decided a verdict other than Pass (the first
// failed one, else the first held one); ok is false for a Pass.
func (r Result) Cause() (Finding, bool) {
	for _, want := range []Verdict{Fail, Hold} {
		for _, f := range r.Findings {
			if f.Verdict == want {
				return f, true
			}
		}
	}
	return Finding{}, false
}

// Reason says why the analysis did not pass ("" when it passed).
func (r Result) Reason() string {
	f, ok := r.Cause()
	if !ok {
		return ""
	}
	if f.Reason == "" {
		return f.Query + ": " + string(f.Verdict)
	}
	return f.Reason
}

// NodesRegexp is the value $nodes stands for in a query: the names as
// alternatives of a PromQL regular expression, escaped for a double-quoted
// PromQL string. No node: a regular expression that matches nothing.
func NodesRegexp(nodes []string) string {
	if len(nodes) == 0 {
		return "$^"
	}
	parts := make([]string, len(nodes))
	for i, n := range nodes {
		parts[i] = strings.ReplaceAll(regexp.QuoteMeta(n), `\`, `\\`)
	}
	return strings.Join(parts, "|")
}

// Expand replaces $nodes in expr with NodesRegexp(nodes).
func Expand(expr string, nodes []string) string {
	return strings.ReplaceAll(expr, "$nodes", NodesRegexp(nodes))
}
