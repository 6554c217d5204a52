package protocol

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestTwoPrograms: the node agent and the controller share only their
// protocol (this package), the decisions (ops/plan) and the plumbing both
// run on (ops/process and below); neither depends on the other, directly
// or through another package. This package talks to no API server.
func TestTwoPrograms(t *testing.T) {
	const mod = "slipway.dev/slipway/ops/"
	deps := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		return strings.Fields(string(out))
	}
	for pkg, never := range map[string][]string{
		mod + "agent":      {mod + "controller", mod + "internal/fleettest"},
		mod + "controller": {mod + "agent", mod + "internal/fleettest"},
		mod + "protocol":   {mod + "plan", mod + "agent", mod + "controller", "k8s.io/client-go/kubernetes", "k8s.io/client-go/rest"},
	} {
		have := deps(pkg)
		for _, n := range never {
			if slices.Contains(have, n) {
				t.Errorf("%s depends on %s", pkg, n)
			}
		}
	}
}
