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
		{"dots", "uid-a", slot("node-upper.example.com", "v2", 1, t0)},
		{"a dash where the other has a dot", "uid-a", slot("node-upper-example.com", "v2", 1, t0)},
		{"long node v2", "uid-a", slot(strings.Repeat("n", 80), "v2", 1, t0)},
		{"long node v3", "uid-a", slot(strings.Repeat("n", 80), "v3", 1, t0)},
		{"a rollback slot to the same version", "uid-a", func() v1.Slot { s := slot("node-1", "v1.2.3+k3s1", 1, t0); s.Rollback = true; return s }()},
	} {
		got := SlotJobName(tc.uid, tc.slot)
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 || len(got) > 63 {
			t.Errorf("%s: %q is not a DNS subdomain of at most 63 characters: %v", tc.name, got, errs)
		}
		if other, ok := names[got]; ok {
			t.Errorf("%s: %q collides with %s", tc.name, got, other)
		}
		names[got] = tc.name
	}
	// A rollback slot's Job is named under the rollback kind's prefix (the
	// admission policy binds a Job's name to its node by its action's kind).
	rb := slot("node-1", "v1", 1, t0)
	rb.Rollback = true
	if got := SlotJobName("u", rb); !strings.HasPrefix(got, JobNamePrefix(JobKindRollback, "node-1")) {
		t.Errorf("a rollback slot's Job is named %q, not under %q", got, JobNamePrefix(JobKindRollback, "node-1"))
	}
	// The fleet view names the Job from the slot it holds in memory (with
	// nanoseconds); the node reads it back from the API (whole seconds).
	if a, b := SlotJobName("u", slot("n", "v2", 1, t0.Add(400*time.Millisecond))), SlotJobName("u", slot("n", "v2", 1, t0)); a != b {
		t.Errorf("the same slot before and after a round trip through the API: %q != %q", a, b)
	}
}

// TestJobNamesOfLongAndDottedNodes: every Job name is a valid name (a DNS
// subdomain of at most 63 characters: its pods' job-name label) under
// its node's prefix, and no two nodes' prefixes are one a prefix of the
// other (so the policy's startsWith binds a name to one node), for node
// names short, dotted, at the bound of the literal form and long, up to
// the 253 characters a Node's name may have. Nodes of the same name length
// that agree in their first JobNodeHead and last JobNodeTail characters
// share a prefix: the documented limit of the long form.
func TestJobNamesOfLongAndDottedNodes(t *testing.T) {
	long := func(n int, head, mid, tail string) string {
		return head + strings.Repeat(mid, n-len(head)-len(tail)) + tail
	}
	nodes := []string{
		"a", "a-b", "a.b", "node-1", "node-1-2", "node-10", "node-1.lan", "node-1-lan",
		"ip-10-0-1-23.eu-west-1.compute.internal", "ip-10-0-1-23-eu-west-1.compute.internal",
		long(41, "n", "x", "-41"), long(42, "n", "x", "-42"), long(44, "n", "x", "-44"), long(45, "n", "x", "-45"),
		long(60, "gke-prod-pool-a-", "x", "-1a2b"), long(60, "gke-prod-pool-a-", "x", "-1a2c"),
		long(60, "gke-prod-pool-b-", "x", "-1a2b"), long(60, "gke-prod-pool-a-", "x", ".1a2b"),
		long(60, "gke-prod-pool-a-xxxxxxx.", "x", "-1a2b"), long(60, "gke-prod-pool-a-xxxxxxx.", "x", ".x.1a2b"),
		long(61, "gke-prod-pool-a-", "x", "-1a2b"),
		long(253, "a.", "b", ".c"), long(253, "a.", "b", ".d"), long(253, "e.", "b", ".c"),
	}
	kinds := []string{JobKindUpgrade, JobKindStage, JobKindPrune, JobKindRollback}
	parts := [][]string{{"v2"}, {"v1.30.2+k3s1", "abcdef", "1"}, {strings.Repeat("v1.2.3+", 12), "abcdef", "12"}, {"+"}}
	type owner struct{ node, kind string }
	prefixes := map[string]owner{}
	for _, node := range nodes {
		for _, kind := range kinds {
			p := JobNamePrefix(kind, node)
			if len(p) > JobPrefixMax {
				t.Errorf("JobNamePrefix(%s, %s) = %q: longer than %d", kind, node, p, JobPrefixMax)
			}
			for q, o := range prefixes {
				if strings.HasPrefix(p, q) || strings.HasPrefix(q, p) {
					t.Errorf("the prefix %q of %s %s and %q of %s %s: one begins the other", p, kind, node, q, o.kind, o.node)
				}
			}
			prefixes[p] = owner{node, kind}
			names := map[string]bool{}
			for _, ps := range parts {
				name := JobName(kind, node, ps...)
				if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 || len(name) > 63 {
					t.Errorf("JobName(%s, %s, %q) = %q: not a DNS subdomain of at most 63 characters: %v", kind, node, ps, name, errs)
				}
				if errs := validation.IsValidLabelValue(name); len(errs) > 0 {
					t.Errorf("JobName(%s, %s, %q) = %q: not a label value (the pods' job-name): %v", kind, node, ps, name, errs)
				}
				if !strings.HasPrefix(name, p) {
					t.Errorf("JobName(%s, %s, %q) = %q: not under its prefix %q", kind, node, ps, name, p)
				}
				if names[name] {
					t.Errorf("JobName(%s, %s, %q) = %q: the same as for other parts", kind, node, ps, name)
				}
				names[name] = true
			}
		}
	}
	// The long form's limit: same length, same head and tail.
	a := long(60, "gke-prod-pool-a-", "x", "-1a2b")
	b := a[:30] + "y" + a[31:]
	if JobNamePrefix(JobKindUpgrade, a) != JobNamePrefix(JobKindUpgrade, b) {
		t.Errorf("the long form keeps only the head and tail: %q and %q", JobNamePrefix(JobKindUpgrade, a), JobNamePrefix(JobKindUpgrade, b))
	}
	if JobName(JobKindUpgrade, a, "v2") == JobName(JobKindUpgrade, b, "v2") {
		t.Errorf("two nodes of one long prefix get the same Job name %q (the rest keeps a hash of the whole)", JobName(JobKindUpgrade, a, "v2"))
	}
}
