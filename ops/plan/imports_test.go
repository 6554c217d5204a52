package plan

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDecisionsOnly: this package holds decisions only; it must not pull
// in an API client (client-go) or the GitHub client, directly or through
// another package.
func TestDecisionsOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "k8s.io/client-go/") || strings.HasPrefix(dep, "github.com/google/go-github/") {
			t.Errorf("ops/plan depends on %s", dep)
		}
	}
}
