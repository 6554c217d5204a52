package testenv

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestStagesMatchTheGoConstants guards the stage file against drifting from
// the label and annotations the executor and supervisor use.
func TestStagesMatchTheGoConstants(t *testing.T) {
	s := string(stagesYAML)
	for _, want := range []string{
		`.metadata.labels["` + ExecutorLabelKey + `"]`, `'` + ExecutorLabelValue + `'`,
		`.metadata.annotations["` + DownAnnotation + `"]`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("stages.yaml does not mention %s", want)
		}
	}
	// The boot ID is the supervisor's alone: a stage writing it from kwok's
	// copy of the Node could put a rebooted node's old boot ID back.
	for _, line := range strings.Split(s, "\n") {
		if l := strings.TrimSpace(line); !strings.HasPrefix(l, "#") && strings.Contains(l, "bootID") {
			t.Errorf("stages.yaml writes the boot ID: %q", l)
		}
	}
	names := map[string]bool{}
	for _, doc := range strings.Split(s, "\n---\n") {
		var st struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &st); err != nil {
			t.Fatalf("stages.yaml: %v", err)
		}
		if st.Kind != "Stage" {
			t.Errorf("document %q is a %q, want Stage", st.Metadata.Name, st.Kind)
		}
		names[st.Metadata.Name] = true
	}
	for _, n := range []string{"node-initialize", "node-down", "pod-ready", "pod-complete", "pod-delete"} {
		if !names[n] {
			t.Errorf("stage %s missing", n)
		}
	}
	// The heartbeat package sends the status heartbeats; a kwok stage
	// sending them too would put them back under other writers' control.
	if names["node-heartbeat-with-lease"] || names["node-heartbeat"] {
		t.Errorf("a kwok heartbeat stage is back: the heartbeat package sends the status heartbeats")
	}
}

func TestNodeLease(t *testing.T) {
	for _, c := range []struct{ seconds, lease, grace int }{
		{0, 40, 0}, {30, 40, 0}, {40, 40, 0}, {240, 240, 300},
	} {
		if lease, grace := nodeLease(c.seconds); lease != c.lease || grace != c.grace {
			t.Errorf("nodeLease(%d) = %d, %d; want %d, %d", c.seconds, lease, grace, c.lease, c.grace)
		}
	}
}
