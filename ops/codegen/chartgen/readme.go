package main

import (
	"encoding/json"
	"fmt"
	"strings"
)

// fieldDocs describe the fields every component's values have, for the
// README's rows after the component's own comment.
var fieldDocs = map[string]string{
	"affinity":                         "the pods' affinity",
	"nodeSelector":                     "the pods' nodeSelector",
	"tolerations":                      "the pods' tolerations",
	"priorityClassName":                "the pods' priorityClassName",
	"resources":                        "the first container's resources",
	"replicas":                         "the Deployment's replicas",
	"podAnnotations":                   "annotations added to the pod template's",
	"podLabels":                        "labels added to the pod template's (not the selector)",
	"podSecurityContext":               "the pod's securityContext (empty: the manifest's; set: replaces it whole)",
	"securityContext":                  "the first container's securityContext (empty: the manifest's; set: replaces it whole)",
	"extraEnv":                         "environment variables appended to the first container's env",
	"serviceAccount.create":            "create the component's ServiceAccount",
	"serviceAccount.name":              "the ServiceAccount the pods run as (empty: the manifest's name)",
	"updateStrategy":                   "the DaemonSet's updateStrategy",
	"extraArgs":                        "arguments added to the container's command line",
	"image.repository":                 "the image's repository",
	"image.tag":                        "the image's tag (empty: the chart's appVersion)",
	"image.pullPolicy":                 "the containers' imagePullPolicy (empty: the kubelet's default)",
	"rbac.create":                      "create the Roles, ClusterRoles and their bindings",
	"serviceMonitor.enabled":           "a headless Service and a ServiceMonitor per component",
	"prometheusRule.enabled":           "the PrometheusRule of rules/alerts.yaml",
	"dashboard.enabled":                "a ConfigMap with the Grafana dashboard",
	"dashboard.labels":                 "labels of the dashboard's ConfigMap (Grafana's sidecar selects it by them)",
	"serviceMonitor.labels":            "labels of the ServiceMonitors (a Prometheus's serviceMonitorSelector)",
	"serviceMonitor.interval":          "the scrape interval",
	"serviceMonitor.scrapeTimeout":     "the scrape timeout (empty: Prometheus's)",
	"serviceMonitor.relabelings":       "relabelings of the ServiceMonitors' endpoint (before the scrape)",
	"serviceMonitor.metricRelabelings": "metricRelabelings of the ServiceMonitors' endpoint (on the scraped series)",
	"prometheusRule.labels":            "labels of the PrometheusRule (a Prometheus's ruleSelector)",
	"prometheusRule.runbookBaseURL":    "where the alerts' runbook_url annotations point",
}

// readmeRow is one value of the README's table.
type readmeRow struct{ key, typ, dflt, desc string }

// readmeRows flattens the values as helm-docs does: a row per leaf of the
// setting groups (components, image, rbac, metrics), one per other value
// (a Kubernetes field or list is one value), in values.yaml's order.
func (v *values) readmeRows() []readmeRow {
	var rows []readmeRow
	var walk func(path string, val any, group bool, desc string)
	walk = func(path string, val any, group bool, desc string) {
		if m, ok := val.(map[string]any); ok && group && len(m) > 0 {
			for i, k := range sortedKeys(m) {
				d := ""
				if i == 0 {
					d = desc
				}
				last := path[strings.LastIndex(path, ".")+1:]
				walk(path+"."+k, m[k], settingGroups[k] || last == "metrics" || settingGroups[last] && k == "serviceAccount", d)
			}
			return
		}
		segs := strings.Split(path, ".")
		for i := range segs {
			if d, ok := fieldDocs[strings.Join(segs[i:], ".")]; ok {
				if desc != "" {
					d = desc + "<br>" + path + ": " + d
				}
				desc = d
				break
			}
		}
		b, _ := json.Marshal(val)
		rows = append(rows, readmeRow{key: path, typ: jsonType(val), dflt: string(b), desc: desc})
	}
	for _, k := range v.order {
		walk(k, v.m[k], settingGroups[k], strings.ReplaceAll(v.comments[k], "\n", " "))
	}
	return rows
}

func jsonType(v any) string {
	switch v.(type) {
	case bool:
		return "bool"
	case string:
		return "string"
	case int, int32, int64, float64:
		return "int"
	case []any, []string:
		return "list"
	case map[string]any:
		return "object"
	default:
		return ""
	}
}

// readme is the chart's README.md: what it installs, how, and a table of its
// values with their defaults and descriptions, from the same source as
// values.yaml's comments.
func readme(c Chart, v *values) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "<!-- %s -->\n# %s\n\n%s.\n\n", strings.TrimPrefix(GeneratedHeader, "# "), c.Name, c.Description)
	if c.NeedsPrivileged {
		fmt.Fprintf(&b, "Its node agents need the privileged Pod Security level:\n\n```sh\nkubectl create namespace %s\nkubectl label namespace %s pod-security.kubernetes.io/enforce=privileged\nhelm install %s <chart> --namespace %s\n```\n\n", c.DefaultNamespace, c.DefaultNamespace, c.Name, c.DefaultNamespace)
	} else {
		fmt.Fprintf(&b, "```sh\nhelm install %s <chart> --namespace %s --create-namespace\n```\n\n", c.Name, c.DefaultNamespace)
	}
	b.WriteString("With the default values the chart installs the objects of the manifest command named in the\ndescription; docs/install.md in slipway's repository has the details, and how to lift the\ncordons left by an uninstall in the middle of a rollout (`slipway uncordon-all`).\n\n## Values\n\n| Key | Type | Default | Description |\n|-----|------|---------|-------------|\n")
	esc := strings.NewReplacer("|", `\|`, "\n", " ")
	for _, r := range v.readmeRows() {
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s |\n", r.key, r.typ, esc.Replace(r.dflt), esc.Replace(r.desc))
	}
	return []byte(b.String())
}
