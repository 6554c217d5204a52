package agent

import (
	"fmt"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/protocol"
)

// jobOwnerAnnotations are the annotations that tie a Job to its slot.
func jobOwnerAnnotations(channelUID types.UID, s v1.Slot) map[string]string {
	return map[string]string{
		protocol.AnnotationJobChannelUID: string(channelUID), protocol.AnnotationJobSlotSince: protocol.SlotSince(s),
		protocol.AnnotationJobNode: s.Node, protocol.AnnotationJobVersion: s.Version, protocol.AnnotationJobAttempt: strconv.Itoa(s.Attempt),
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
