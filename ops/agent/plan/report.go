package plan

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// A node's agent writes nothing into a channel's status: it reports its
// slot's progress and its staging permit given back on its own Node (an
// annotation, Reports as JSON, keyed by the channel's UID), and the
// controller folds the reports into the status (Fold). The own-Node
// admission policy lets an agent write that annotation on its Node only,
// so a node reports for itself and for no other.

// Outcomes a report ends a slot with.
const (
	OutcomeSucceeded = "Succeeded" // upgraded, Ready, uncordoned: the slot is freed
	OutcomeFailed    = "Failed"    // the slot is freed and the failure recorded
	OutcomeReleased  = "Released"  // given back without a failure (the window)
)

// Report is a node's report of its slot in one channel, and of the staging
// permit it gave back there.
type Report struct {
	// The slot reported: its claim time, attempt and version (plan.SameSlot).
	Since   metav1.Time `json:"since,omitempty"`
	Attempt int         `json:"attempt,omitempty"`
	Version string      `json:"version,omitempty"`
	// Phase and Job are the slot's progress.
	Phase string `json:"phase,omitempty"`
	Job   string `json:"job,omitempty"`
	// Outcome ends the slot (Outcome*), Reason says why, At when.
	Outcome string      `json:"outcome,omitempty"`
	Reason  string      `json:"reason,omitempty"`
	At      metav1.Time `json:"at,omitempty"`
	// PermitDone is the claim time of the staging permit the node gave back.
	PermitDone *metav1.Time `json:"permitDone,omitempty"`
}

// Reports are a node's reports by channel UID.
type Reports map[types.UID]Report

// ParseReports reads a node's report annotation ("" is none).
func ParseReports(s string) (Reports, error) {
	out := Reports{}
	if s == "" {
		return out, nil
	}
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return Reports{}, fmt.Errorf("the slot report annotation is not JSON: %w", err)
	}
	return out, nil
}

// String is the annotation's value.
func (r Reports) String() string {
	b, _ := json.Marshal(r) // map of plain structs: cannot fail
	return string(b)
}

// Of is the report's slot as it applies to slot: slot with the reported
// phase and Job when the report is of the same slot (and further along);
// the report's outcome ("" when none, or when it is of another slot).
func (r Report) Of(slot v1.Slot) (v1.Slot, string) {
	if !r.is(slot) {
		return slot, ""
	}
	return Newest(slot, v1.Slot{Node: slot.Node, Version: r.Version, Attempt: r.Attempt, Since: r.Since, Phase: r.Phase, Job: r.Job}), r.Outcome
}

// is tells whether r is of slot (the same grant: claim time, attempt, version).
func (r Report) is(slot v1.Slot) bool {
	return r.Version == slot.Version && r.Attempt == slot.Attempt && r.Since.Unix() == slot.Since.Unix()
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
func Fold(st *v1.UpdateChannelStatus, uid types.UID, reports map[string]Reports) Folded {
	var f Folded
	for _, sl := range append([]v1.Slot(nil), st.Updating...) {
		r, ok := reports[sl.Node][uid]
		if !ok || !r.is(sl) {
			continue
		}
		switch r.Outcome {
		case OutcomeSucceeded:
			Succeed(st, sl.Node)
			f.Succeeded = append(f.Succeeded, sl.Node)
		case OutcomeFailed:
			f.Failed = append(f.Failed, Fail(st, sl.Node, sl.Version, r.Reason, r.At.Time))
		case OutcomeReleased:
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
