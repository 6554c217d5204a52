package oldkube

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/process"
	"slipway.dev/slipway/ops/testenv"
)

// TestAgentRunsOnTheOldServerOnlyUnderTheWebhook: the agent's and the
// controller's start (process.WaitForSupportedServer) goes on against the
// 1.23 server when the manifest confines them by the webhook, and waits,
// saying which manifest to install, when it would rely on policies the
// server lacks.
func TestAgentRunsOnTheOldServerOnlyUnderTheWebhook(t *testing.T) {
	e := testenv.Need(t, env)
	cs, err := kube.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)

	t.Setenv(process.IsolationEnv, process.IsolationWebhook)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := process.WaitForSupportedServer(ctx, cs, log); err != nil {
		t.Fatalf("under the webhook isolation on %s: %v", testenv.OldKubeVersion, err)
	}

	t.Setenv(process.IsolationEnv, process.IsolationPolicy)
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err = process.WaitForSupportedServer(ctx, cs, log)
	if err == nil || !strings.Contains(err.Error(), "--isolation=webhook") || !strings.Contains(err.Error(), testenv.OldKubeVersion) {
		t.Fatalf("under the policy isolation on %s: %v, want a wait naming the server and the webhook manifest", testenv.OldKubeVersion, err)
	}
}
