package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	uo "slipway.dev/slipway/ops/updateoperator"
)

// The analysis flags: kured's carry their meaning into the alert gate;
// an analysis without a Prometheus, a bad regular expression or address,
// and a bad analysis file are refused with what to do.
func TestControllerAnalysisFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "analysis.yaml")
	if err := os.WriteFile(file, []byte("queries:\n- name: errors\n  query: up\n  condition: '> 0'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("queries:\n- name: errors\n  query: up\n  condition: lots\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	parse := func(args ...string) (uo.Analysis, error) {
		var got uo.Analysis
		var perr error
		app := &cli.App{Commands: []*cli.Command{{Name: "c", Flags: uoAnalysisFlags(), Action: func(c *cli.Context) error {
			got, perr = uoAnalysis(c)
			return nil
		}}}}
		if err := app.Run(append([]string{"slipway", "c"}, args...)); err != nil {
			t.Fatal(err)
		}
		return got, perr
	}
	if a, err := parse(); err != nil || !a.Spec.Empty() || a.Querier != nil {
		t.Errorf("no flag: %+v %v, want no analysis", a, err)
	}
	a, err := parse("--prometheus-url", "http://prom:9090", "--alert-filter-regexp", "^Watchdog$", "--alert-firing-only", "--analysis-file", file, "--bake-time", "5m")
	if err != nil || !a.Spec.Alerts.Enabled || !a.Spec.Alerts.FiringOnly || a.Spec.Alerts.MatchOnly || a.Spec.Alerts.Filter.String() != "^Watchdog$" ||
		len(a.Spec.Queries) != 1 || a.Bake != 5*time.Minute || a.Querier == nil {
		t.Errorf("every flag: %+v %v", a, err)
	}
	if a.Spec.Alerts.Blocks("Watchdog", "firing") || !a.Spec.Alerts.Blocks("NodeDown", "firing") {
		t.Errorf("--alert-filter-regexp names alerts to ignore, as kured's")
	}
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"--analysis-file", file}, "need --prometheus-url"},
		{[]string{"--bake-time", "1m"}, "need --prometheus-url"},
		{[]string{"--prometheus-url", "prom:9090"}, "http(s)://host:port"},
		{[]string{"--prometheus-url", "http://prom:9090", "--alert-filter-regexp", "("}, "not a regular expression"},
		{[]string{"--prometheus-url", "http://prom:9090", "--analysis-file", bad}, `condition "lots"`},
		{[]string{"--prometheus-url", "http://prom:9090", "--analysis-file", filepath.Join(t.TempDir(), "none.yaml")}, "--analysis-file"},
	} {
		if _, err := parse(c.args...); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%v: error %v, want one with %q", c.args, err, c.err)
		}
	}
}
