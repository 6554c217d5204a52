package protocol

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/manifest"
)

func TestLabelValue(t *testing.T) {
	for in, want := range map[string]string{
		"v1.30.2+k3s1":     "v1.30.2-k3s1",
		"v0.2.0":           "v0.2.0",
		"+weird+":          "weird",
		"5.15.0-1-generic": "5.15.0-1-generic",
	} {
		if got := LabelValue(in); got != want {
			t.Errorf("LabelValue(%q) = %q, want %q", in, got, want)
		}
	}
	long := strings.Repeat("v1.2.3+", 20)
	for _, s := range []string{long, long + "x"} {
		if errs := validation.IsValidLabelValue(LabelValue(s)); len(errs) > 0 {
			t.Errorf("LabelValue(%q) is invalid: %v", s, errs)
		}
	}
	if LabelValue(long) == LabelValue(long+"x") {
		t.Error("long values must keep a hash of the whole")
	}
}

// TestLeaseNamesMatchTheManifest: the admission policy admits the Leases
// by the names the agent and the controller write.
func TestLeaseNamesMatchTheManifest(t *testing.T) {
	if AgentLeasePrefix != manifest.HeartbeatLeasePrefix || ControllerLease != manifest.ControllerLease {
		t.Errorf("leases %q %q, the manifest admits %q %q", AgentLeasePrefix, ControllerLease, manifest.HeartbeatLeasePrefix, manifest.ControllerLease)
	}
}

// TestControllerAppMatchesTheManifest: the drain leaves the controller's
// pods by the label the manifest gives them.
func TestControllerAppMatchesTheManifest(t *testing.T) {
	if ControllerApp != manifest.ControllerName {
		t.Errorf("the drain keeps pods named %q, the manifest labels the controller's %q", ControllerApp, manifest.ControllerName)
	}
}

func TestSlotJobName(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	slot := func(node, version string, attempt int, since time.Time) v1.Slot {
		return v1.Slot{Node: node, Version: version, Attempt: attempt, Since: metav1.NewTime(since)}
	}
	names := map[string]string{}
	for _, tc := range []struct {
		name string
		uid  types.UID
		slot v1.Slot
	}{
		{"first", "uid-a", slot("node-1", "v1.2.3+k3s1", 1, t0)},
		{"retry", "uid-a", slot("node-1", "v1.2.3+k3s1", 2, t0.Add(time.Minute))},
		{"node-10 is not node-1", "uid-a", slot("node-10", "v1.2.3+k3s1", 1, t0)},
		{"a later rollout to the same version", "uid-a", slot("node-1", "v1.2.3+k3s1", 1, t0.Add(time.Hour))},
		{"a recreated channel", "uid-b", slot("node-1", "v1.2.3+k3s1", 1, t0)},
		{"upper case and dots", "uid-a", slot("Node_Upper.example.com", "v2", 1, t0)},
		{"long node v2", "uid-a", slot(strings.Repeat("n", 80), "v2", 1, t0)},
		{"long node v3", "uid-a", slot(strings.Repeat("n", 80), "v3", 1, t0)},
	} {
		got := SlotJobName(tc.uid, tc.slot)
		if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
			t.Errorf("%s: %q is not a DNS label: %v", tc.name, got, errs)
		}
		if other, ok := names[got]; ok {
			t.Errorf("%s: %q collides with %s", tc.name, got, other)
		}
		names[got] = tc.name
	}
	// The fleet view names the Job from the slot it holds in memory (with
	// nanoseconds); the node reads it back from the API (whole seconds).
	if a, b := SlotJobName("u", slot("n", "v2", 1, t0.Add(400*time.Millisecond))), SlotJobName("u", slot("n", "v2", 1, t0)); a != b {
		t.Errorf("the same slot before and after a round trip through the API: %q != %q", a, b)
	}
}
