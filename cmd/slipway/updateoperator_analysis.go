package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"slipway.dev/slipway/ops/analysis"
	uo "slipway.dev/slipway/ops/updateoperator"
)

// uoAnalysisFlags are the controller's analysis flags: kured's Prometheus
// gate with kured's names and meaning, the queries and the bake time
// (docs/analysis.md).
func uoAnalysisFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "prometheus-url", Usage: "Prometheus (or any server of its query API) to ask: while an alert is active there, no node starts (as kured); the --analysis-file queries are asked there", EnvVars: uoEnvs("PROMETHEUS_URL")},
		&cli.StringFlag{Name: "alert-filter-regexp", Usage: "alert names to ignore when checking for active alerts (kured's flag)", EnvVars: uoEnvs("ALERT_FILTER_REGEXP")},
		&cli.BoolFlag{Name: "alert-filter-match-only", Usage: "only alerts whose name --alert-filter-regexp matches block (kured's flag)", EnvVars: uoEnvs("ALERT_FILTER_MATCH_ONLY")},
		&cli.BoolFlag{Name: "alert-firing-only", Usage: "only firing alerts block, not pending ones (kured's flag)", EnvVars: uoEnvs("ALERT_FIRING_ONLY")},
		&cli.StringFlag{Name: "analysis-file", Usage: "PromQL queries with a threshold or \"empty\" (YAML, docs/analysis.md), asked before a node starts and during --bake-time: a failure halts the rollout until `slipway update-operator resume`", EnvVars: uoEnvs("ANALYSIS_FILE")},
		&cli.DurationFlag{Name: "bake-time", Usage: "after each node's update, no node starts for this long; the analysis must pass at its end (needs --prometheus-url)", EnvVars: uoEnvs("BAKE_TIME")},
		&cli.DurationFlag{Name: "analysis-interval", Value: 10 * time.Second, Usage: "ask the analysis at most this often", EnvVars: uoEnvs("ANALYSIS_INTERVAL")},
	}
}

// uoAnalysis reads the analysis flags.
func uoAnalysis(c *cli.Context) (uo.Analysis, error) {
	a := uo.Analysis{Bake: c.Duration("bake-time"), Interval: c.Duration("analysis-interval")}
	url := c.String("prometheus-url")
	if f := c.String("analysis-file"); f != "" {
		s, err := analysis.LoadFile(f)
		if err != nil {
			return a, fmt.Errorf("--analysis-file: %w", err)
		}
		a.Spec = s
	}
	if url == "" {
		if len(a.Spec.Queries) > 0 || a.Bake > 0 {
			return a, fmt.Errorf("--analysis-file and --bake-time need --prometheus-url (the Prometheus to ask)")
		}
		return a, nil
	}
	filter, err := analysis.AlertFilter(c.String("alert-filter-regexp"))
	if err != nil {
		return a, err
	}
	a.Spec.Alerts = analysis.Alerts{Enabled: true, Filter: filter, MatchOnly: c.Bool("alert-filter-match-only"), FiringOnly: c.Bool("alert-firing-only")}
	if a.Querier, err = analysis.NewClient(url); err != nil {
		return a, err
	}
	return a, nil
}
