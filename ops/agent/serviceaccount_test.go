package agent

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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

// TestPodSecurityRefusalSaysWhatToDo: in a namespace whose Pod Security
// level is below privileged (a Helm install that lost its label), the API
// server refuses the slot's Pod at once (a Job's pod was refused to the
// Job controller, unseen), and the agent's Warning Event says what to do.
func TestPodSecurityRefusalSaysWhatToDo(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	if _, err := f.Kube.CoreV1().Namespaces().Patch(t.Context(), f.NS, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"baseline"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.Start(f.NS + "-n0")
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(), NodeSelector: f.Selector()})
	if f.Events("JobRefused", 1) < 1 {
		t.Fatal("no JobRefused Event for a slot Pod Pod Security refused")
	}
	events, err := f.Kube.CoreV1().Events(f.NS).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=JobRefused"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if !strings.Contains(e.Message, "pod-security.kubernetes.io/enforce=privileged") {
			t.Errorf("the Event does not say what to do: %s", e.Message)
		}
	}
}
