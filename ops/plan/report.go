package plan

import (
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/protocol"
)

// The controller's side of the nodes' reports (protocol.Reports): what a
// report means for its slot, and the fold of every report into the
// channel's status.

// Reported is report r's slot as it applies to slot: slot with the reported
// phase and Job when the report is of the same slot (and further along);
// the report's outcome ("" when none, or when it is of another slot).
func Reported(r protocol.Report, slot v1.Slot) (v1.Slot, string) {
	if !r.For(slot) {
		return slot, ""
	}
	return Newest(slot, v1.Slot{Node: slot.Node, Version: r.Version, Attempt: r.Attempt, Since: r.Since, Phase: r.Phase, Job: r.Job}), r.Outcome
}

// Folded is what Fold did, for the controller's Events and metrics.
type Folded struct {
	Succeeded []string     // nodes upgraded
	Failed    []v1.Failure // failures recorded
	Released  []string     // "node: why"
	Permits   []string     // nodes whose staging permit was given back
}

// Fold applies the nodes' reports (by node) for the channel of UID uid to
// st: each slot takes its node's phase and Job; a slot with an outcome is
// freed (with its failure recorded when it failed); a permit its node gave
// back goes. A report of another slot or permit (an older grant, another
// channel) changes nothing.
func Fold(st *v1.UpdateChannelStatus, uid types.UID, reports map[string]protocol.Reports) Folded {
	var f Folded
	for _, sl := range append([]v1.Slot(nil), st.Updating...) {
		r, ok := reports[sl.Node][uid]
		if !ok || !r.For(sl) {
			continue
		}
		switch r.Outcome {
		case protocol.OutcomeSucceeded:
			Succeed(st, sl.Node)
			f.Succeeded = append(f.Succeeded, sl.Node)
		case protocol.OutcomeFailed:
			f.Failed = append(f.Failed, Fail(st, sl.Node, sl.Version, r.Reason, r.At.Time))
		case protocol.OutcomeReleased:
			Release(st, sl.Node)
			f.Released = append(f.Released, sl.Node+": "+r.Reason)
		default:
			i := FindSlot(*st, sl.Node)
			st.Updating[i] = Newest(st.Updating[i], v1.Slot{Node: sl.Node, Version: r.Version, Attempt: r.Attempt, Since: sl.Since, Phase: r.Phase, Job: r.Job})
		}
	}
	for _, p := range append([]v1.StagePermit(nil), st.Staging...) {
		if r, ok := reports[p.Node][uid]; ok && r.PermitDone != nil && r.PermitDone.Unix() == p.Since.Unix() {
			ReleasePermit(st, p.Node)
			f.Permits = append(f.Permits, p.Node)
		}
	}
	return f
}
