package chaos

import (
	"testing"
	"time"

	"slipway.dev/slipway/ops/testenv/faults"
	"slipway.dev/slipway/ops/testenv/monitor"
)

// TestExcusedReboot: what a node's own reboot explains is excused at its
// instant only; slipway's cordon rules never.
func TestExcusedReboot(t *testing.T) {
	at := time.Unix(1000, 0)
	strikes := []faults.Strike{{Kind: faults.Reboot, Node: "node-2", At: at, Back: at.Add(5 * time.Second), BootID: "b-own"}}
	down := "2 nodes unavailable: node-1 (cordoned by slipway-agent); node-2 (NotReady)"
	for _, tc := range []struct {
		v    monitor.Violation
		want bool
	}{
		{monitor.Violation{Invariant: monitor.InvRebootWithoutDrain, Key: "node-2@b-own", At: at.Add(6 * time.Second)}, true},
		{monitor.Violation{Invariant: monitor.InvRebootWithoutDrain, Key: "node-2@b-later", At: at.Add(6 * time.Second)}, false},
		{monitor.Violation{Invariant: monitor.InvChannelConcurrency, Message: down, At: at.Add(2 * time.Second)}, true},
		{monitor.Violation{Invariant: monitor.InvChannelConcurrency, Message: down, At: at.Add(time.Minute)}, false},
		{monitor.Violation{Invariant: monitor.InvChannelConcurrency, Message: down, At: at.Add(-time.Second)}, false},
		{monitor.Violation{Invariant: monitor.InvCordonBudget, Message: down, At: at.Add(2 * time.Second)}, false},
	} {
		if got := excusedReboot(tc.v, strikes); got != tc.want {
			t.Errorf("excusedReboot(%s %s at %s) = %t, want %t", tc.v.Invariant, tc.v.Key, tc.v.At.Sub(at), got, tc.want)
		}
	}
}
