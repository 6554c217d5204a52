package webhook

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoAPIServerCode: the webhook is linked into the one slipway
// binary, so every node's agent runs the inits of what it links. The API
// server's admission packages (k8s.io/apiserver) bring feature gates,
// metrics registries, OpenAPI formats and audit with them: measured, they
// cost every agent about 0.9 MiB of anonymous memory and 5 MiB of PSS
// (docs/design/2026-11-28-old-kubernetes-webhook.md). Only the tests may
// link them (reference_test.go).
func TestLinksNoAPIServerCode(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("this test runs go list: %v", err)
	}
	cmd := exec.Command(goTool, "list", "-deps", "slipway.dev/slipway/ops/webhook")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "k8s.io/apiserver/") || strings.HasPrefix(p, "k8s.io/component-base/") {
			t.Errorf("ops/webhook links %s", p)
		}
	}
}
