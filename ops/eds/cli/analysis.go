package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
)

// CanaryAnalysis prints the analysis of an ExtendedDaemonSet's canary: the
// Prometheus it asks, its queries, and the latest verdict on the running
// canary (or what failed the last one).
func (c *Client) CanaryAnalysis(ctx context.Context, name string) error {
	e, err := c.get(ctx, name)
	if err != nil {
		return err
	}
	var a *v1.CanaryAnalysis
	if cs := e.Spec.Strategy.Canary; cs != nil {
		a = cs.Analysis
	}
	var st *v1.CanaryAnalysisStatus
	if e.Status.Canary != nil {
		st = e.Status.Canary.Analysis
	}
	if c.Output == "json" || c.Output == "yaml" {
		return c.printObjects([]any{map[string]any{"spec": a, "status": st}}, true)
	}
	if a == nil {
		_, err := fmt.Fprintf(c.Out, "ExtendedDaemonSet %s: its canary names no analysis (spec.strategy.canary.analysis)\n", name)
		return err
	}
	w := tabwriter.NewWriter(c.Out, 3, 0, 3, ' ', 0)
	interval := "10s"
	if a.Interval != nil {
		interval = a.Interval.Duration.String()
	}
	fmt.Fprintf(w, "Prometheus:\t%s (asked every %s)\n", a.PrometheusURL, interval)
	for _, q := range a.Queries {
		fmt.Fprintf(w, "Query %s:\t%s %s\n", q.Name, q.Query, q.Condition)
	}
	if g := a.Alerts; g != nil {
		fmt.Fprintf(w, "Alerts:\tactive alerts hold (ignored: %s, firing only: %v)\n", orNone(g.FilterRegexp), g.FiringOnly)
	}
	switch {
	case e.Status.Canary != nil && st != nil:
		fmt.Fprintf(w, "Canary:\tERS %s on nodes %s\n", e.Status.Canary.ReplicaSet, orNone(strings.Join(e.Status.Canary.Nodes, ", ")))
		at := "-"
		if !st.At.IsZero() {
			at = st.At.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "Verdict:\t%s (at %s)\n", st.Verdict, at)
		if st.Query != "" {
			fmt.Fprintf(w, "Query:\t%s = %s\n", st.Query, orNone(st.Value))
		}
		if st.Reason != "" {
			fmt.Fprintf(w, "Reason:\t%s\n", st.Reason)
		}
		if cond := meta.FindStatusCondition(e.Status.Conditions, v1.ConditionCanaryAnalysisHolding); cond != nil && cond.Status == "True" {
			fmt.Fprintf(w, "Holding:\t%s: %s\n", cond.Reason, cond.Message)
		}
	case e.Status.Canary != nil:
		fmt.Fprintf(w, "Canary:\tERS %s: the analysis has not been asked yet\n", e.Status.Canary.ReplicaSet)
	default:
		fmt.Fprintf(w, "Canary:\tnone runs\n")
		if cond := meta.FindStatusCondition(e.Status.Conditions, v1.ConditionCanaryFailed); cond != nil && cond.Status == "True" {
			fmt.Fprintf(w, "Last failure:\t%s (%s)\n", cond.Message, cond.Reason)
		}
	}
	return w.Flush()
}

// analysisColumn is the ANALYSIS column of `get -o wide`: the running
// canary's latest verdict, "-" when none.
func analysisColumn(e *v1.ExtendedDaemonSet) string {
	if e.Status.Canary == nil || e.Status.Canary.Analysis == nil {
		return "-"
	}
	a := e.Status.Canary.Analysis
	if a.Query != "" && a.Verdict != "Pass" {
		return a.Verdict + " (" + a.Query + ")"
	}
	return a.Verdict
}
