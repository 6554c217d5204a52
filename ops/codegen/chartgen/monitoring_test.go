package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"sigs.k8s.io/yaml"
)

// registeredMetrics are the metric names slipway's code registers, read
// from the Go source of ops/ (prometheus.*Opts{Name: "slipway_..."}, and the
// swarm controller's Namespace/Subsystem helpers), with a histogram's
// _bucket, _sum and _count series. Only the firstOnEvent names (families
// no running process serves before an event the scrape test does not
// cause) are still checked against it.
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	named := regexp.MustCompile(`Name:\s*"(slipway_[a-z0-9_]+)"`)
	swarm := regexp.MustCompile(`(?:gauge|counter)\("([a-z0-9_]+)"|Subsystem: "swarm", Name: "([a-z0-9_]+)"`)
	histo := regexp.MustCompile(`NewHistogram(?:Vec)?\(prometheus\.HistogramOpts\{Name:\s*"(slipway_[a-z0-9_]+)"`)
	out := map[string]bool{}
	err := filepath.WalkDir("../..", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range named.FindAllStringSubmatch(string(b), -1) {
			out[m[1]] = true
		}
		for _, m := range histo.FindAllStringSubmatch(string(b), -1) {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[m[1]+s] = true
			}
		}
		if strings.Contains(p, filepath.Join("swarm", "controller")) {
			for _, m := range swarm.FindAllStringSubmatch(string(b), -1) {
				out["slipway_swarm_"+m[1]+m[2]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 20 {
		t.Fatalf("found only %d registered metrics: the source scan is broken", len(out))
	}
	return out
}

var metricName = regexp.MustCompile(`\bslipway_[a-z0-9_]+`)

// kubeStateAlerts are the alerts that rest on kube-state-metrics' series
// alone, for want of a slipway series, and what that series would be. A
// label such as annotation_ops_slipway_dev_drain_started is no slipway metric.
// None today: SlipwayNodeCordonedTooLong, the last one, reads the
// controller's slipway_channel_node_cordoned_since_timestamp_seconds and
// slipway_channel_slot_limit_seconds.
var kubeStateAlerts = map[string]string{}

// absentAlert is the shape of the "absent" alerts: Prometheus's own up
// series of one job of the chart's ServiceMonitors, and no slipway metric.
var absentAlert = regexp.MustCompile(`^absent\(up\{job="[a-z0-9-]+-metrics"\} == 1\)$`)

// TestAlertsNameASlipwayMetric: every alert but the "absent" ones rests on
// a slipway_* metric (kubeStateAlerts lists the exceptions). Whether the
// metrics a dashboard or alert names are served is TestChartMetricsServed's
// check, on the running processes' /metrics.
func TestAlertsNameASlipwayMetric(t *testing.T) {
	for chart := range Dashboards {
		var rules struct {
			Groups []struct {
				Rules []struct{ Alert, Expr string }
			}
		}
		b, err := os.ReadFile(filepath.Join(chartsDir, chart, "rules", "alerts.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, &rules); err != nil {
			t.Fatal(err)
		}
		for _, g := range rules.Groups {
			for _, r := range g.Rules {
				if absentAlert.MatchString(r.Expr) {
					continue // Prometheus's own up of the chart's ServiceMonitor job
				}
				names := metricName.MatchString(r.Expr)
				switch why, excepted := kubeStateAlerts[r.Alert]; {
				case !names && !excepted:
					t.Errorf("%s alert %s names no slipway metric", chart, r.Alert)
				case names && excepted:
					t.Errorf("%s alert %s names a slipway metric now: drop it from kubeStateAlerts (%s)", chart, r.Alert, why)
				}
			}
		}
	}
}

// TestAlertRules runs promtool's rule tests (charts/*/rules/alerts_test.yaml)
// with the pinned promtool, and checks each alert has a runbook section.
func TestAlertRules(t *testing.T) {
	promtool := filepath.Join(filepath.Dir(helmBin(t)), "promtool")
	docs, err := os.ReadFile("../../../docs/alerts.md")
	if err != nil {
		t.Fatal(err)
	}
	alert := regexp.MustCompile(`(?m)^\s*- alert: (\S+)`)
	for _, c := range Charts() {
		dir := filepath.Join(chartsDir, c.Name, "rules")
		cmd := exec.Command(promtool, "test", "rules", "alerts_test.yaml")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: promtool test rules: %v\n%s", c.Name, err, out)
		}
		b, err := os.ReadFile(filepath.Join(dir, "alerts.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range alert.FindAllStringSubmatch(string(b), -1) {
			if !strings.Contains(string(docs), "\n### "+m[1]+"\n") {
				t.Errorf("docs/alerts.md has no runbook section \"### %s\"", m[1])
			}
		}
		// Every alert links its runbook by URL: its section's anchor.
		var rules struct {
			Groups []struct {
				Rules []struct {
					Alert       string            `json:"alert"`
					Annotations map[string]string `json:"annotations"`
				} `json:"rules"`
			} `json:"groups"`
		}
		if err := yaml.Unmarshal(b, &rules); err != nil {
			t.Fatal(err)
		}
		for _, g := range rules.Groups {
			for _, r := range g.Rules {
				if want := RunbookBaseURL + "#" + strings.ToLower(r.Alert); r.Alert != "" && r.Annotations["runbook_url"] != want {
					t.Errorf("%s alert %s: runbook_url %q, want %q", c.Name, r.Alert, r.Annotations["runbook_url"], want)
				}
			}
		}
	}
}

// TestRunbookBaseURLValue: the chart's runbookBaseURL value replaces the
// base of every alert's runbook_url in the PrometheusRule it renders.
func TestRunbookBaseURLValue(t *testing.T) {
	for _, c := range Charts() {
		out := helm(t, "template", "rel", filepath.Join(chartsDir, c.Name), "--namespace", c.DefaultNamespace,
			"--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.prometheusRule.runbookBaseURL=https://wiki.example.org/slipway")
		objs, err := ParseDocs(out)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, o := range objs {
			if o["kind"] != "PrometheusRule" {
				continue
			}
			for _, g := range o["spec"].(map[string]any)["groups"].([]any) {
				for _, r := range g.(map[string]any)["rules"].([]any) {
					rule := r.(map[string]any)
					name, _ := rule["alert"].(string)
					if name == "" {
						continue
					}
					n++
					url := rule["annotations"].(map[string]any)["runbook_url"]
					if want := "https://wiki.example.org/slipway#" + strings.ToLower(name); url != want {
						t.Errorf("%s alert %s: runbook_url %v, want %s", c.Name, name, url, want)
					}
				}
			}
		}
		if n == 0 {
			t.Errorf("%s: no alert rendered", c.Name)
		}
	}
}

// TestMonitoringRenders: with the monitoring values on, each chart renders
// a Service and ServiceMonitor per metrics port, the PrometheusRule holding
// the rule file's groups, and the dashboard ConfigMap holding valid JSON.
func TestMonitoringRenders(t *testing.T) {
	for _, c := range Charts() {
		objs, err := ParseDocs(helm(t, "template", "rel", filepath.Join(chartsDir, c.Name), "--namespace", c.DefaultNamespace,
			"--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.dashboard.enabled=true"))
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]int{}
		services := map[string]bool{}
		for _, o := range objs {
			kinds[o["kind"].(string)]++
			if o["kind"] == "Service" {
				services[fmt.Sprint(o["metadata"].(map[string]any)["name"])] = true
			}
			switch o["kind"] {
			case "PrometheusRule":
				groups, _ := o["spec"].(map[string]any)["groups"].([]any)
				if len(groups) == 0 {
					t.Errorf("%s: the PrometheusRule has no groups", c.Name)
				}
			case "ConfigMap":
				for k, v := range o["data"].(map[string]any) {
					if !json.Valid([]byte(v.(string))) {
						t.Errorf("%s: ConfigMap key %s is not JSON", c.Name, k)
					}
				}
			}
		}
		// Each "absent" alert watches the job of a ServiceMonitor the chart
		// renders (Prometheus names the job after the Service).
		rules, err := os.ReadFile(filepath.Join(chartsDir, c.Name, "rules", "alerts.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		jobs := regexp.MustCompile(`absent\(up\{job="([^"]+)"\}`).FindAllStringSubmatch(string(rules), -1)
		if len(jobs) == 0 {
			t.Errorf("%s: no absent alert", c.Name)
		}
		for _, j := range jobs {
			if !services[j[1]] {
				t.Errorf("%s: an absent alert watches job %s, but the chart's metrics Services are %v", c.Name, j[1], services)
			}
		}
		if kinds["ServiceMonitor"] == 0 || kinds["Service"] != kinds["ServiceMonitor"] || kinds["PrometheusRule"] != 1 || kinds["ConfigMap"] != 1 {
			keys := make([]string, 0, len(kinds))
			for k := range kinds {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			t.Errorf("%s: monitoring objects rendered: %v", c.Name, kinds)
		}
	}
}

// TestServiceMonitorOptions: the ServiceMonitor options kube-prometheus
// users set reach every ServiceMonitor's endpoint, and an empty
// scrapeTimeout leaves the field out (Prometheus's own default).
func TestServiceMonitorOptions(t *testing.T) {
	for _, c := range Charts() {
		for _, set := range [][]string{nil, {"--set", "metrics.serviceMonitor.scrapeTimeout=10s",
			"--set-json", `metrics.serviceMonitor.relabelings=[{"targetLabel":"cluster","replacement":"prod"}]`,
			"--set-json", `metrics.serviceMonitor.metricRelabelings=[{"action":"drop","regex":"go_.*","sourceLabels":["__name__"]}]`}} {
			args := append([]string{"template", "rel", filepath.Join(chartsDir, c.Name), "--set", "metrics.serviceMonitor.enabled=true"}, set...)
			objs, err := ParseDocs(helm(t, args...))
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, o := range objs {
				if o["kind"] != "ServiceMonitor" {
					continue
				}
				n++
				ep := o["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)
				_, timeout := ep["scrapeTimeout"]
				_, rl := ep["relabelings"]
				_, mrl := ep["metricRelabelings"]
				if set == nil && (timeout || rl || mrl) {
					t.Errorf("%s: defaults render %v", c.Name, ep)
				}
				if set != nil && (ep["scrapeTimeout"] != "10s" || fmt.Sprint(ep["relabelings"]) != "[map[replacement:prod targetLabel:cluster]]" ||
					fmt.Sprint(ep["metricRelabelings"]) != "[map[action:drop regex:go_.* sourceLabels:[__name__]]]") {
					t.Errorf("%s: endpoint %v lacks the options set", c.Name, ep)
				}
			}
			if n == 0 {
				t.Errorf("%s: no ServiceMonitor", c.Name)
			}
		}
	}
}

// TestDashboardsReadBackWithGrafanasTypes: each chart's committed dashboard
// JSON decodes with the foundation SDK's own types (its panel and query
// plugins registered, strict about their shapes) into one timeseries panel
// per Dashboards entry, each with its queries, and a datasource variable.
func TestDashboardsReadBackWithGrafanasTypes(t *testing.T) {
	plugins.RegisterDefaultPlugins()
	for chart, panels := range Dashboards {
		b, err := os.ReadFile(filepath.Join(chartsDir, chart, "dashboards", chart+".json"))
		if err != nil {
			t.Fatal(err)
		}
		//lint:ignore SA1019 the classic schema DashboardJSON writes (see there)
		d := &dashboard.Dashboard{}
		if err := json.Unmarshal(b, d); err != nil {
			t.Fatalf("%s: %v", chart, err)
		}
		if len(d.Panels) != len(panels) {
			t.Fatalf("%s: %d panels, want %d", chart, len(d.Panels), len(panels))
		}
		for i, p := range d.Panels {
			pn := p.Panel
			if pn == nil || pn.Type != "timeseries" || pn.Title == nil || *pn.Title != panels[i].Title || len(pn.Targets) != len(panels[i].Targets) {
				t.Errorf("%s: panel %d reads back as %+v", chart, i, pn)
				continue
			}
			for j, tg := range pn.Targets {
				q, ok := tg.(*prometheus.Dataquery)
				if !ok || q.Expr != panels[i].Targets[j].Expr {
					t.Errorf("%s: panel %q query %d reads back as %#v", chart, panels[i].Title, j, tg)
				}
			}
		}
		if d.Templating.List == nil || len(d.Templating.List) != 1 || d.Templating.List[0].Type != "datasource" {
			t.Errorf("%s: templating %+v", chart, d.Templating)
		}
	}
}
