package chaos

import (
	"strings"

	"slipway.dev/slipway/ops/testenv/faults"
	"slipway.dev/slipway/ops/testenv/monitor"
)

// rebootGrace is how long after a node is back from a reboot of its own
// the monitor may still see it down by that reboot's doing.
const rebootGrace = faultGrace

// excusedReboot reports whether v is what a reboot the injector caused
// (faults.Reboot: the node's own, not slipway's) explains at its instant:
// the new boot ID it gave the node (reboot-without-drain,
// reboot-without-slot: no drain or slot precedes it), or a state
// invariant naming that node NotReady from its fall until rebootGrace
// after it was back (channel-concurrency, control-plane-one-down).
// slipway's own rules (cordon-within-budget, cordon-control-plane-alone)
// are not excused here (raceExcuse judges them).
func excusedReboot(v monitor.Violation, strikes []faults.Strike) bool {
	for _, st := range strikes {
		if st.Kind != faults.Reboot {
			continue
		}
		switch v.Invariant {
		case monitor.InvRebootWithoutDrain, monitor.InvRebootWithoutSlot:
			if st.BootID != "" && v.Key == st.Node+"@"+st.BootID {
				return true
			}
		case monitor.InvChannelConcurrency, monitor.InvControlPlane:
			if !v.At.Before(st.At) && !v.At.After(st.Back.Add(rebootGrace)) && strings.Contains(v.Message, st.Node+" (NotReady") {
				return true
			}
		}
	}
	return false
}
