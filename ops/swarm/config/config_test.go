package config

import (
	"slices"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	c := Config{Version: 7, Workloads: map[string]Workload{
		"swarm-worker-1": {Jobs: []string{"b", "c"}, Version: 5},
		"swarm-worker-0": {Jobs: nil, Version: 7},
	}}
	text, err := c.Render()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "version: 7\nworkloads:\n  swarm-worker-0:\n    jobs: []\n") {
		t.Errorf("unexpected rendering:\n%s", text)
	}
	back, err := Parse(text)
	if err != nil || !back.Equal(c) {
		t.Errorf("Parse(Render(c)) = %+v, %v; want %+v", back, err, c)
	}
	other := back
	other.Workloads = map[string]Workload{"swarm-worker-1": {Jobs: []string{"c", "b"}, Version: 5}, "swarm-worker-0": {Version: 6}}
	if other.Equal(c) {
		t.Error("configs with different worker versions compare equal")
	}
}

func TestParseRefusesGarbage(t *testing.T) {
	for _, text := range []string{"workloads: [1, 2]", "version: x", "unknown: 1"} {
		if _, err := Parse(text); err == nil {
			t.Errorf("Parse(%q) accepted", text)
		}
	}
	if c, err := Parse(""); err != nil || c.Workloads == nil {
		t.Errorf("empty text: %+v, %v", c, err)
	}
}

func TestParseJobs(t *testing.T) {
	for text, want := range map[string][]string{
		"cam-1\n  cam-2 \n\n# off: cam-9\ncam-3\n": {"cam-1", "cam-2", "cam-3"},
		"# streams\n- cam-1\n- cam-2\n":            {"cam-1", "cam-2"},
		"[a, b, a]":                                {"a", "b", "a"},
		"":                                         nil,
	} {
		got, err := ParseJobs(text)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseJobs(%q) = %q, %v; want %q", text, got, err, want)
		}
	}
	if _, err := ParseJobs("- a\n- {b: 1}\n"); err == nil {
		t.Error("a YAML list of maps was accepted")
	}
}
