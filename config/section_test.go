package config

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func parseYAML(t *testing.T, body string) (Section, error) {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	return ParseSection(doc)
}

func TestParseSectionValid(t *testing.T) {
	s, err := parseYAML(t, `
k3os: {password: rancher}      # not ours: left alone
slipway:
  operator:
    enabled: true
    namespace: upgrades
    url: github-releases://example/os
    version: latest
    concurrency: 2
    window: {days: [sat, sun], start: "02:00", end: "05:00", timeZone: Europe/Berlin}
    nodeSelector: {slipway.dev/channel: stable}
  labels: {slipway.dev/channel: stable, rack: r1}
`)
	if err != nil {
		t.Fatal(err)
	}
	o := s.Operator
	if !o.Enabled || o.Namespace != "upgrades" || *o.Concurrency != 2 || o.Window.TimeZone != "Europe/Berlin" || len(o.Window.Days) != 2 ||
		o.NodeSelector["slipway.dev/channel"] != "stable" || s.Labels["rack"] != "r1" {
		t.Errorf("section = %+v", s)
	}
	if s, err := parseYAML(t, "hostname: x\n"); err != nil || s.Operator.Enabled {
		t.Errorf("no section: %+v, %v", s, err)
	}
}

func TestParseSectionNamesTheBadKey(t *testing.T) {
	cases := []struct{ name, body, want string }{
		{"unknown top key", "slipway: {operater: {enabled: true}}", "slipway.operater: unknown key"},
		{"unknown nested key", "slipway: {operator: {enabled: true, concurency: 2}}", "slipway.operator.concurency: unknown key"},
		{"unknown window key", "slipway: {operator: {window: {from: '01:00'}}}", "slipway.operator.window.from: unknown key"},
		{"section not a mapping", "slipway: true", "slipway: want a mapping"},
		{"wrong type", "slipway: {operator: {concurrency: two}}", "slipway.operator.concurrency: want an integer, got string"},
		{"wrong bool", "slipway: {operator: {enabled: 'yes please'}}", "slipway.operator.enabled: want true or false"},
		{"concurrency below 1", "slipway: {operator: {concurrency: 0}}", "slipway.operator.concurrency: must be at least 1"},
		{"bad url scheme", "slipway: {operator: {url: 'ftp://x/y'}}", "slipway.operator.url:"},
		{"bad window", "slipway: {operator: {window: {start: '25:00', end: '02:00'}}}", "slipway.operator.window:"},
		{"bad time zone", "slipway: {operator: {window: {start: '01:00', end: '02:00', timeZone: Mars/Olympus}}}", "slipway.operator.window:"},
		{"bad namespace", "slipway: {operator: {namespace: Not_A_Name}}", "slipway.operator.namespace:"},
		{"bad label name", "slipway: {labels: {'bad key!': x}}", "slipway.labels.bad key!: invalid label name"},
		{"bad label value", "slipway: {labels: {ok: 'no spaces'}}", "slipway.labels.ok: invalid label value"},
		{"bad selector", "slipway: {operator: {nodeSelector: {'a/b/c': x}}}", "slipway.operator.nodeSelector.a/b/c: invalid label name"},
		{"version with a slash", "slipway: {operator: {version: 'v1/../x'}}", "slipway.operator.version:"},
		{"version that is a link name's temp file", "slipway: {operator: {version: v1.tmp}}", "slipway.operator.version:"},
		{"version that is a dot path", "slipway: {operator: {version: '..'}}", "slipway.operator.version:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseYAML(t, c.body)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v\nwant one containing %q", err, c.want)
			}
		})
	}
}

func TestParseSectionReportsEveryUnknownKey(t *testing.T) {
	_, err := parseYAML(t, "slipway: {operator: {urll: x, versoin: y}, lables: {}}")
	for _, want := range []string{"slipway.lables", "slipway.operator.urll", "slipway.operator.versoin"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %s named", err, want)
		}
	}
}
