package main

import (
	"encoding/json"
	"fmt"
	"strings"
)

// metricsPortNames are the container port names a workload serves
// /metrics on.
var metricsPortNames = []string{"metrics", "http"}

// RunbookBaseURL is where the rule files' runbook_url annotations point
// (docs/alerts.md, one section per alert); the chart's
// metrics.prometheusRule.runbookBaseURL replaces it, for a site that hosts
// the runbooks elsewhere.
const RunbookBaseURL = "https://slipway.dev/docs/alerts.md"

// metricsLabel marks the headless Service of one workload's metrics.
const metricsLabel = "slipway.dev/metrics"

// monitoring adds the optional monitoring objects (all off by default, so
// the default render stays the manifest's): a headless Service and a
// ServiceMonitor per workload that declares a metrics port, the
// PrometheusRule of rules/alerts.yaml (hand-written, tested with promtool),
// and a ConfigMap holding the Grafana dashboard (dashboards/<chart>.json,
// generated from Dashboards) for Grafana's sidecar.
func (c Chart) monitoring(files map[string][]byte, docs []Object, vals *values) error {
	var b strings.Builder
	b.WriteString(GeneratedHeader + "\n{{- if .Values.metrics.serviceMonitor.enabled }}\n")
	n := 0
	for _, o := range docs {
		if k := o["kind"]; k != "Deployment" && k != "DaemonSet" && k != "StatefulSet" {
			continue
		}
		name := fmt.Sprint(o["metadata"].(map[string]any)["name"])
		sel, _ := dig(o, []string{"spec", "selector", "matchLabels"})
		pod, _ := dig(o, []string{"spec", "template", "spec"})
		port, num := metricsPort(pod)
		if port == "" || len(sel) == 0 {
			continue
		}
		selJSON, err := json.Marshal(sel)
		if err != nil {
			return err
		}
		n++
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Service
metadata:
  name: %[1]s-metrics
  namespace: {{ .Release.Namespace }}
  labels:
    app.kubernetes.io/part-of: slipway
    %[2]s: %[1]s
spec:
  clusterIP: None
  selector: %[3]s
  ports:
  - name: metrics
    port: %[4]v
    targetPort: %[5]s
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: %[1]s
  namespace: {{ .Release.Namespace }}
  labels:
    app.kubernetes.io/part-of: slipway
    {{- with .Values.metrics.serviceMonitor.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  selector:
    matchLabels:
      %[2]s: %[1]s
  endpoints:
  - port: metrics
    path: /metrics
    interval: {{ .Values.metrics.serviceMonitor.interval }}
    {{- with .Values.metrics.serviceMonitor.scrapeTimeout }}
    scrapeTimeout: {{ . }}
    {{- end }}
    {{- with .Values.metrics.serviceMonitor.relabelings }}
    relabelings:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with .Values.metrics.serviceMonitor.metricRelabelings }}
    metricRelabelings:
      {{- toYaml . | nindent 6 }}
    {{- end }}
`, name, metricsLabel, selJSON, num, port)
	}
	if n == 0 {
		return fmt.Errorf("no workload declares a metrics port (%s)", strings.Join(metricsPortNames, ", "))
	}
	fmt.Fprintf(&b, `{{- end }}
{{- if .Values.metrics.prometheusRule.enabled }}
---
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: %[1]s
  namespace: {{ .Release.Namespace }}
  labels:
    app.kubernetes.io/part-of: slipway
    {{- with .Values.metrics.prometheusRule.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  {{- .Files.Get "rules/alerts.yaml" | replace "%[2]s#" (printf "%%s#" .Values.metrics.prometheusRule.runbookBaseURL) | nindent 2 }}
{{- end }}
{{- if .Values.metrics.dashboard.enabled }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: %[1]s-dashboard
  namespace: {{ .Release.Namespace }}
  labels:
    app.kubernetes.io/part-of: slipway
    {{- toYaml .Values.metrics.dashboard.labels | nindent 4 }}
data:
  %[1]s.json: {{ .Files.Get "dashboards/%[1]s.json" | toJson }}
{{- end }}
`, c.Name, RunbookBaseURL)
	files["templates/monitoring.yaml"] = []byte(b.String())
	dash, err := DashboardJSON(c.Name)
	if err != nil {
		return err
	}
	files["dashboards/"+c.Name+".json"] = dash
	files[".helmignore"] = []byte(GeneratedHeader + "\n# promtool's rule tests are not part of the chart.\nrules/*_test.yaml\n")
	vals.set("metrics", map[string]any{
		"serviceMonitor": map[string]any{"enabled": false, "interval": "30s", "scrapeTimeout": "", "labels": map[string]any{},
			"relabelings": []any{}, "metricRelabelings": []any{}},
		"prometheusRule": map[string]any{"enabled": false, "labels": map[string]any{}, "runbookBaseURL": RunbookBaseURL},
		"dashboard":      map[string]any{"enabled": false, "labels": map[string]any{"grafana_dashboard": "1"}},
	}, "Monitoring with the Prometheus operator and Grafana (docs/alerts.md), all off by default:\n"+
		"serviceMonitor: a headless Service and a ServiceMonitor per component serving /metrics (interval,\n"+
		"scrapeTimeout (empty: Prometheus's), labels of the ServiceMonitor, relabelings and metricRelabelings of its\n"+
		"endpoint; a relabeling that changes job breaks the \"absent\" alerts, which name the metrics Services);\n"+
		"prometheusRule: the alerts of rules/alerts.yaml (runbookBaseURL: where their runbook_url\n"+
		"annotations point, <runbookBaseURL>#<alert name in lower case>); dashboard: a ConfigMap with the Grafana\n"+
		"dashboard, labelled for Grafana's dashboard sidecar.")
	return nil
}

// metricsPort returns the name and number of the first container's port
// serving /metrics.
func metricsPort(pod map[string]any) (string, any) {
	ctrs, _ := pod["containers"].([]any)
	for _, ci := range ctrs {
		ports, _ := ci.(map[string]any)["ports"].([]any)
		for _, want := range metricsPortNames {
			for _, p := range ports {
				pm := p.(map[string]any)
				if pm["name"] == want {
					return want, pm["containerPort"]
				}
			}
		}
	}
	return "", nil
}
