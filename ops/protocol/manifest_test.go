package protocol

import (
	"slices"
	"testing"

	"slipway.dev/slipway/ops/manifest"
)

// TestJobContractOfThePolicy: the Job policy checks the keys, actions and
// name prefix the agents write.
func TestJobContractOfThePolicy(t *testing.T) {
	if LabelJobNode != manifest.JobNodeKey || AnnotationJobNode != manifest.JobNodeKey || AnnotationJobAction != manifest.JobActionKey {
		t.Errorf("keys %q %q %q, the policy checks %q %q", LabelJobNode, AnnotationJobNode, AnnotationJobAction, manifest.JobNodeKey, manifest.JobActionKey)
	}
	if want := []string{"", JobActionStage, JobActionPrune, JobActionRollback}; !slices.Equal(want, manifest.JobActions) {
		t.Errorf("actions %q, the policy admits %q", want, manifest.JobActions)
	}
	if JobKindUpgrade != manifest.JobKindUpgrade || JobKindStage != JobActionStage || JobKindPrune != JobActionPrune || JobKindRollback != JobActionRollback {
		t.Errorf("a Job's kind is its action, or %q on a slot's Job", manifest.JobKindUpgrade)
	}
}

// TestJobNameBoundsOfThePolicy: the policy computes a node's Job name
// prefix (protocol.JobNamePrefix) with the same bounds.
func TestJobNameBoundsOfThePolicy(t *testing.T) {
	if JobPrefixMax != manifest.JobPrefixMax || JobNodeHead != manifest.JobNodeHead || JobNodeTail != manifest.JobNodeTail {
		t.Errorf("bounds %d %d %d, the policy's %d %d %d", JobPrefixMax, JobNodeHead, JobNodeTail, manifest.JobPrefixMax, manifest.JobNodeHead, manifest.JobNodeTail)
	}
}
