package agent

import (
	"fmt"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// Annotations on an upgrade Job (and its pod) that name the one rollout it
// belongs to, written by the agent that creates it. A Job's result is
// believed only when they match the slot at hand: a Job of an earlier
// rollout to the same version (v1 -> v2 -> v1 -> v2), of a deleted and
// recreated channel, or of another channel says nothing about this one.
const (
	// AnnotationJobChannelUID is the UID of the channel whose slot made the Job.
	AnnotationJobChannelUID = "ops.slipway.dev/channel-uid"
	// AnnotationJobSlotSince is when that slot was claimed (RFC 3339, seconds):
	// with the node, version and attempt it tells one slot from every other.
	AnnotationJobSlotSince = "ops.slipway.dev/slot-since"
	// AnnotationJobVersion is the version the Job installs.
	AnnotationJobVersion = "ops.slipway.dev/version"
	// AnnotationJobAttempt is the slot's attempt.
	AnnotationJobAttempt = "ops.slipway.dev/attempt"
)

// slotSince is a slot's claim time as the API server stores it (metav1.Time
// keeps whole seconds), so the writer and every reader agree on it.
func slotSince(s v1.Slot) string {
	return s.Since.Time.UTC().Truncate(time.Second).Format(time.RFC3339)
}

// SlotJobName names the upgrade Job of one slot of one channel: node,
// version, a short hash of the channel's UID and the slot's claim time (the
// rollout), and the attempt. A retry, a later rollout to the same version
// and a recreated channel each get a new name, so no Job of another rollout
// is ever taken for this one's.
func SlotJobName(channelUID types.UID, s v1.Slot) string {
	rollout := shortHash(string(channelUID) + "/" + slotSince(s))[:6]
	return DNSLabel(fmt.Sprintf("upgrade-%s-%s-%s-%d", s.Node, s.Version, rollout, s.Attempt))
}

// jobOwnerAnnotations are the annotations that tie a Job to its slot.
func jobOwnerAnnotations(channelUID types.UID, s v1.Slot) map[string]string {
	return map[string]string{
		AnnotationJobChannelUID: string(channelUID), AnnotationJobSlotSince: slotSince(s),
		AnnotationJobNode: s.Node, AnnotationJobVersion: s.Version, AnnotationJobAttempt: strconv.Itoa(s.Attempt),
	}
}

// jobOwnedBy reports whether Job j was made for slot s of the channel with
// channelUID, and if not, which annotation differs.
func jobOwnedBy(j *batchv1.Job, channelUID types.UID, s v1.Slot) (bool, string) {
	for k, want := range jobOwnerAnnotations(channelUID, s) {
		if got := j.Annotations[k]; got != want {
			return false, fmt.Sprintf("%s is %q, not %q", k, got, want)
		}
	}
	return true, ""
}
