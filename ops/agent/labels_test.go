package agent

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

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

func TestChannelOf(t *testing.T) {
	long := strings.Repeat("c", 70)
	for _, c := range []struct {
		name string
		meta metav1.ObjectMeta
		want string
	}{
		{"exact name from the annotation", metav1.ObjectMeta{Annotations: map[string]string{AnnotationJobChannel: long}, Labels: map[string]string{LabelJobChannel: LabelValue(long)}}, long},
		{"an older agent's Job: the label", metav1.ObjectMeta{Labels: map[string]string{LabelJobChannel: "default"}}, "default"},
		{"neither", metav1.ObjectMeta{}, ""},
	} {
		if got := channelOf(c.meta); got != c.want {
			t.Errorf("%s: channelOf = %q, want %q", c.name, got, c.want)
		}
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
