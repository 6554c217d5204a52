//go:build chaos_pending

package chaos

import "testing"

// TestHostPendingSchedules runs the host schedules whose defect is still
// open (go test -tags chaos_pending, SLIPWAY_CHAOS_NAMED not needed):
// k3os-power-cut-staging, a server losing power while it stages ahead
// (no slot) as the slot's server is about to cordon; the agent cordons
// its node ~1 s after the other server went NotReady.
func TestHostPendingSchedules(t *testing.T) {
	needCluster(t)
	runNamed(t, hostPending...)
}
