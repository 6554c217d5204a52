package plan

import (
	"time"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// phaseOrder ranks the phases in the order a node goes through them.
var phaseOrder = map[string]int{"": 0, PhasePending: 0, PhaseUpgrading: 1, PhaseDraining: 2, PhaseRebooting: 3, PhaseWaitingReady: 4}

// Newest returns the later of two views of a node's slot: seen, from the
// informer's cache, and wrote, what this agent last wrote to it. The cache
// can lag behind the agent's own write; acting on the older view would
// write the same phase again. wrote counts only for the same slot (node,
// version and attempt).
func Newest(seen, wrote v1.Slot) v1.Slot {
	if !SameSlot(seen, wrote) {
		return seen
	}
	if phaseOrder[wrote.Phase] > phaseOrder[seen.Phase] {
		seen.Phase, seen.Job = wrote.Phase, wrote.Job
	}
	return seen
}

// SlowStep is how long a step may take before its phase is written to the
// slot: a node Ready quickly after its reboot writes no WaitingReady, and a
// drain done within it shows no Draining (HoldBackDraining).
const SlowStep = 2 * time.Second
