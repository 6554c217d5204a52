package eds

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
)

// targetLabels are the labels Prometheus attaches to every series it
// scrapes through the chart's ServiceMonitor (honorLabels off): the
// controller pod's namespace, pod, job and instance.
var targetLabels = map[string]string{"namespace": "slipway-system", "pod": "slipway-eds-controller-a",
	"job": "slipway-eds-controller", "instance": "10.0.0.5:9480"}

// scraped is the series the collector exports for e, as Prometheus stores
// them: every exported label that collides with a target label is renamed
// exported_<name> (what Prometheus does without honorLabels), then the
// target labels are added.
func scraped(t *testing.T, e *v1.ExtendedDaemonSet) []string {
	t.Helper()
	m := newMetrics()
	m.observe(e, map[string]*counts{e.Name + "-abcde": {desired: 3, current: 3, ready: 2, available: 2}})
	fams, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), "slipway_eds_") || f.GetType() != dto.MetricType_GAUGE {
			continue
		}
		for _, mt := range f.Metric {
			labels := map[string]string{}
			for _, l := range mt.Label {
				name := l.GetName()
				if _, clash := targetLabels[name]; clash {
					name = "exported_" + name
				}
				labels[name] = l.GetValue()
			}
			for k, v := range targetLabels {
				labels[k] = v
			}
			keys := make([]string, 0, len(labels))
			for k := range labels {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			var parts []string
			for _, k := range keys {
				parts = append(parts, fmt.Sprintf("%s=%q", k, labels[k]))
			}
			out = append(out, fmt.Sprintf("%s{%s} %g", f.GetName(), strings.Join(parts, ","), mt.GetGauge().GetValue()))
		}
	}
	return out
}

// alertRules is the chart's rule file.
type alertRules struct {
	Groups []struct {
		Rules []struct {
			Alert       string            `json:"alert"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

var labelRef = regexp.MustCompile(`\{\{ \$labels\.(\w+) \}\}`)

// TestAlertsMatchWhatTheCollectorExports feeds promtool the series the real
// collector exports for an ExtendedDaemonSet in each state, with the labels
// Prometheus attaches, held for 30 minutes: the canary alerts fire for the
// states they name (by the EDS's namespace and name), and nothing fires
// for a running one. Rules matching a state spelled otherwise than the
// status spells it, or grouping by a label the series do not carry, fail.
func TestAlertsMatchWhatTheCollectorExports(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: promtool is a built tool")
	}
	dir := os.Getenv("SLIPWAY_TOOLS_DIR")
	if dir == "" {
		out, err := exec.Command("../../scripts/install-tools").Output()
		if err != nil {
			t.Fatalf("scripts/install-tools: %v", err)
		}
		f := strings.Fields(string(out))
		dir = f[len(f)-1]
	}
	promtool := filepath.Join(dir, "promtool")
	rulesPath, err := filepath.Abs("../../charts/slipway-eds/rules/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	var rules alertRules
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	byAlert := map[string]map[string]any{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			byAlert[r.Alert] = map[string]any{"labels": r.Labels, "annotations": r.Annotations}
		}
	}
	for _, tc := range []struct {
		state v1.ExtendedDaemonSetStatusState
		fires []string
	}{
		{v1.StateRunning, nil},
		{v1.StateCanary, nil},
		{v1.StateCanaryPaused, []string{"SlipwayEDSCanaryPaused"}},
		{v1.StateCanaryFailed, []string{"SlipwayEDSCanaryFailed"}},
		{v1.StateRollingUpdatePaused, nil},
		{v1.StateRolloutFrozen, nil},
	} {
		e := &v1.ExtendedDaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "monitoring", Name: "node-exporter"},
			Status: v1.ExtendedDaemonSetStatus{State: tc.state, Desired: 3, UpToDate: 3}}
		var inputs []map[string]string
		for _, s := range scraped(t, e) {
			i := strings.LastIndex(s, " ")
			inputs = append(inputs, map[string]string{"series": s[:i], "values": s[i+1:] + "x30"})
		}
		var tests []map[string]any
		for _, alert := range []string{"SlipwayEDSCanaryPaused", "SlipwayEDSCanaryFailed"} {
			r, ok := byAlert[alert]
			if !ok {
				t.Fatalf("no alert %s in %s", alert, rulesPath)
			}
			test := map[string]any{"eval_time": "20m", "alertname": alert}
			for _, f := range tc.fires {
				if f != alert {
					continue
				}
				values := map[string]string{"eds_namespace": e.Namespace, "eds": e.Name}
				labels := map[string]string{}
				for k, v := range r["labels"].(map[string]string) {
					labels[k] = v
				}
				for k, v := range values {
					labels[k] = v
				}
				ann := map[string]string{}
				for k, v := range r["annotations"].(map[string]string) {
					ann[k] = labelRef.ReplaceAllStringFunc(v, func(ref string) string { return values[labelRef.FindStringSubmatch(ref)[1]] })
				}
				test["exp_alerts"] = []map[string]any{{"exp_labels": labels, "exp_annotations": ann}}
			}
			tests = append(tests, test)
		}
		file := map[string]any{"rule_files": []string{rulesPath}, "evaluation_interval": "1m",
			"tests": []map[string]any{{"interval": "1m", "input_series": inputs, "alert_rule_test": tests}}}
		out, err := yaml.Marshal(file)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "alerts_test.yaml")
		os.WriteFile(path, out, 0o644)
		if res, err := exec.Command(promtool, "test", "rules", path).CombinedOutput(); err != nil {
			t.Errorf("state %q: promtool on the collector's series: %v\n%s\nseries:\n%s", tc.state, err, res, out)
		}
	}
}
