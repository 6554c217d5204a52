package agent

import (
	"testing"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/manifest"
)

// TestRefusedJobIsReported: a channel whose token Secret the manifest does
// not allow gets its Jobs refused by the API server (the Job policy), and
// the agent says so in a Warning Event on the channel rather than only in
// its log.
func TestRefusedJobIsReported(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	f.AsServiceAccount(manifest.Options{})
	f.Start(f.NS + "-n0")
	f.Channel(v1.UpdateChannelSpec{URL: "github-releases://o/r", Version: "v2", RebootDelay: fleettest.ZeroDelay(), NodeSelector: f.Selector(),
		TokenSecretRef: &v1.SecretKeyRef{Name: "not-allowed"}})
	if f.Events("JobRefused", 1) < 1 {
		t.Error("no JobRefused Event for a Job the admission policy refused")
	}
}
