package updateoperator

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"slipway.dev/slipway/ops/testenv"
)

// A node back at the new version that then stays NotReady does not keep
// its slot for ever: past --state-timeout its update fails with a reason
// and an UpdateFailed Event, the operator's cordon is lifted, and at
// max-concurrent 1 the next node updates.
func TestNotReadyAfterTheRebootEnds(t *testing.T) {
	f := newFleetOn(t, env, "notready")
	f.addNode("notready-0", true)
	f.addNode("notready-1", true)
	sick := f.nodes[0]
	f.mu.Lock()
	f.stayDown[sick] = true
	f.mu.Unlock()
	t.Cleanup(func() {
		f.patch(sick, map[string]any{"metadata": map[string]any{"annotations": map[string]any{testenv.DownAnnotation: nil}}})
	})
	stop := f.controller(func(o *ControllerOptions) { o.Policy.Timeouts.Reboot = 5 * time.Second })
	defer stop()
	eventually(t, 2*time.Minute, "the other node updated while the sick one is NotReady", func() (bool, string) {
		n := f.node(f.nodes[1])
		v := f.keys.View(n, "")
		return f.version(f.nodes[1]) == "v2" && v.Wanted == IntentStabilize && v.State == StateUpToDate,
			fmt.Sprintf("%s at %s, wanted %s, state %s", f.nodes[1], f.version(f.nodes[1]), v.Wanted, v.State)
	})
	// Either node may go first: the sick one's failure may come after the
	// other's update. Its slot ends failed, naming NotReady, uncordoned.
	eventually(t, 2*time.Minute, "the sick node failed for NotReady and uncordoned", func() (bool, string) {
		var failed bool
		for _, m := range f.eventMessages(sick) {
			failed = failed || strings.HasPrefix(m, ReasonFailed) && strings.Contains(m, "NotReady")
		}
		cordoned := f.node(sick).Spec.Unschedulable
		return failed && !cordoned, fmt.Sprintf("%s Event naming NotReady: %t; cordoned: %t; events %v", ReasonFailed, failed, cordoned, f.eventMessages(sick))
	})
}
