package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"
)

// promTargetLabels are the labels the Prometheus operator's ServiceMonitor
// attaches to every series it scrapes (honorLabels off): the Service's
// name as job and service, the port name as endpoint, the pod's namespace,
// name and container, and the address scraped as instance.
var promTargetLabels = []string{"container", "endpoint", "instance", "job", "namespace", "pod", "service"}

// scrapeTarget is one metrics Service of a chart as its ServiceMonitor
// scrapes it: the port and the container of the pods it selects.
type scrapeTarget struct{ port, container string }

// scrapeTargets renders c with its ServiceMonitors on and returns its
// metrics Services by name (the job of every series scraped through them).
func scrapeTargets(t *testing.T, c Chart) map[string]scrapeTarget {
	t.Helper()
	out := helm(t, "template", "x", filepath.Join(chartsDir, c.Name), "--namespace", "ns",
		"--set", "metrics.serviceMonitor.enabled=true")
	type obj struct {
		Kind     string
		Metadata struct {
			Name   string
			Labels map[string]string
		}
		Spec struct {
			Selector map[string]any
			Ports    []struct {
				Name       string
				Port       int
				TargetPort any `json:"targetPort"`
			}
			Template struct {
				Metadata struct{ Labels map[string]string }
				Spec     struct {
					Containers []struct {
						Name  string
						Ports []struct {
							Name          string
							ContainerPort int `json:"containerPort"`
						}
					}
				}
			}
		}
	}
	docs, err := ParseDocs(out)
	if err != nil {
		t.Fatalf("%s: helm template: %v", c.Name, err)
	}
	var objs []obj
	for _, d := range docs {
		b, _ := sigsyaml.Marshal(d)
		var o obj
		if err := sigsyaml.Unmarshal(b, &o); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	targets := map[string]scrapeTarget{}
	for _, svc := range objs {
		if svc.Kind != "Service" || svc.Metadata.Labels[metricsLabel] == "" || len(svc.Spec.Ports) != 1 {
			continue
		}
		p := svc.Spec.Ports[0]
		for _, w := range objs {
			if w.Kind != "Deployment" && w.Kind != "DaemonSet" && w.Kind != "StatefulSet" {
				continue
			}
			match := true
			for k, v := range svc.Spec.Selector {
				if w.Spec.Template.Metadata.Labels[k] != v {
					match = false
				}
			}
			if !match {
				continue
			}
			for _, ctr := range w.Spec.Template.Spec.Containers {
				for _, cp := range ctr.Ports {
					if cp.Name == p.TargetPort {
						targets[svc.Metadata.Name] = scrapeTarget{port: ":" + strconv.Itoa(cp.ContainerPort), container: ctr.Name}
					}
				}
			}
		}
	}
	if len(targets) == 0 {
		t.Fatalf("%s: no metrics Service selects a workload's metrics port", c.Name)
	}
	return targets
}

var seriesLabel = regexp.MustCompile(`(\w+)="([^"]*)"`)

// TestAlertTestsCarryTargetLabels: every slipway_* series the promtool
// tests feed the rules carries the labels Prometheus attaches when it
// scrapes the chart's ServiceMonitors, consistent with one of the chart's
// metrics Services (job and service its name, endpoint its port's name,
// instance on the container's port, container the one serving it). Rules
// tested on series without them could group by or match on a label that
// real series spell otherwise (the EDS rules did: their namespace label
// was the controller's).
func TestAlertTestsCarryTargetLabels(t *testing.T) {
	for _, c := range Charts() {
		targets := scrapeTargets(t, c)
		b, err := os.ReadFile(filepath.Join(chartsDir, c.Name, "rules", "alerts_test.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var file struct {
			Tests []struct {
				InputSeries []struct{ Series string } `json:"input_series"`
			}
		}
		if err := sigsyaml.Unmarshal(b, &file); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		n := 0
		for _, tc := range file.Tests {
			for _, in := range tc.InputSeries {
				name, body, _ := strings.Cut(in.Series, "{")
				if !strings.HasPrefix(name, "slipway_") {
					continue
				}
				n++
				labels := map[string]string{}
				for _, m := range seriesLabel.FindAllStringSubmatch(body, -1) {
					labels[m[1]] = m[2]
				}
				for _, l := range promTargetLabels {
					if labels[l] == "" {
						t.Errorf("%s: series %s has no %s label (Prometheus attaches %s)", c.Name, in.Series, l, strings.Join(promTargetLabels, ", "))
					}
				}
				tg, ok := targets[labels["job"]]
				switch {
				case !ok:
					t.Errorf("%s: series %s: job %q is none of the chart's metrics Services %v", c.Name, in.Series, labels["job"], sortedKeys(targets))
				case labels["service"] != labels["job"] || labels["endpoint"] != "metrics" ||
					!strings.HasSuffix(labels["instance"], tg.port) || labels["container"] != tg.container:
					t.Errorf("%s: series %s: want service=job, endpoint=metrics, instance on port %s, container %s", c.Name, in.Series, tg.port, tg.container)
				}
			}
		}
		if n == 0 {
			t.Errorf("%s: its alert tests feed no slipway series", c.Name)
		}
	}
}
