package plan

import (
	"time"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// Holds reports whether st, as the API server returned it, still gives node
// the slot want: the same node, version and attempt (want.Attempt 0 accepts
// any attempt). A node cordons, drains and reboots only on a slot that
// Holds in a fresh read (or in its own confirmed write): a cached copy may
// still show a slot that was freed milliseconds ago.
func Holds(st v1.UpdateChannelStatus, node string, want v1.Slot) bool {
	i := FindSlot(st, node)
	if i < 0 {
		return false
	}
	want.Node = node
	return want.Attempt == 0 || SameSlot(st.Updating[i], want)
}

// SameSlot reports whether a and b are the same grant of a slot: the same
// node, version and attempt, claimed at the same time (within one
// channel: the caller compares the channel's UID). A slot given back
// without a failure (a window deferral, a channel made invalid and valid
// again) and granted again for the same version and attempt is another
// slot: nothing done or remembered for the first counts for the second.
func SameSlot(a, b v1.Slot) bool {
	return a.Node == b.Node && a.Version == b.Version && a.Attempt == b.Attempt && a.Since.Equal(&b.Since)
}

// DrainBudget is how long a drain may still run: timeout counted from
// started, when the drain of this slot began (recorded on the Node, so
// that an agent restart does not start the clock again). ok false (nothing
// recorded) gives the whole timeout; a start in the future (clock skew)
// counts as now. expired says the timeout has passed: the drain gets one
// last pass, then the timeout's policy (force or fail) applies.
func DrainBudget(started time.Time, ok bool, now time.Time, timeout time.Duration) (left time.Duration, expired bool) {
	if !ok || started.After(now) {
		return timeout, false
	}
	left = timeout - now.Sub(started)
	if left <= 0 {
		return 0, true
	}
	return left, false
}
