package protocol

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// A node's agent writes nothing into a channel's status: it reports its
// slot's progress and its staging permit given back on its own Node (an
// annotation, Reports as JSON, keyed by the channel's UID), and the
// controller folds the reports into the status (plan.Fold). The own-Node
// admission policy lets an agent write that annotation on its Node only,
// so a node reports for itself and for no other.

// Outcomes a report ends a slot with.
const (
	OutcomeSucceeded = "Succeeded" // upgraded, Ready, uncordoned: the slot is freed
	OutcomeFailed    = "Failed"    // the slot is freed and the failure recorded
	OutcomeReleased  = "Released"  // given back without a failure (the window)
)

// Report is a node's report of its slot in one channel, and of the staging
// permit it gave back there. It is the API's SlotReport under another
// name: the slot report annotation on a Node and a NodeUpdate's
// status.reports[] carry the same fields (their doc comments are there).
type Report v1.SlotReport

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

// For tells whether r is of slot (the same grant: claim time, attempt, version).
func (r Report) For(slot v1.Slot) bool {
	return r.Version == slot.Version && r.Attempt == slot.Attempt && r.Since.Unix() == slot.Since.Unix()
}
