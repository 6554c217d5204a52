//go:build chaos_pending

package chaos

import "testing"

// TestHostPendingSchedules runs the host schedules whose defect is still
// open (go test -tags chaos_pending, SLIPWAY_CHAOS_NAMED not needed):
//   - k3os-power-cut-staging: a server loses power while it stages ahead
//     (no slot) as the slot's server is about to cordon; slipway cordons
//     that server ~1 s after the other went NotReady;
//   - k3os-power-cut-rollback: a failed drain's slot is released before
//     the node's rollback Job has undone its swap; the next node's slot
//     starts beside that host write, and a power cut during it takes the
//     node down as the next one is cordoned.
func TestHostPendingSchedules(t *testing.T) {
	needCluster(t)
	runNamed(t, hostPending...)
}
