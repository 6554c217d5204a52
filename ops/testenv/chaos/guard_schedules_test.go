package chaos

import (
	"os"
	"strings"
	"testing"
)

// TestGuardSchedules runs the guard schedules (SLIPWAY_CHAOS_NAMED=1, as
// the other named schedules): k3os-window-deferral-then-reboot must pass
// under the monitor and the host checks, its window must have deferred a
// slot whose node then rebooted by itself, and that reboot must boot the
// release the node ran (ownRebootsBootWhatRan).
func TestGuardSchedules(t *testing.T) {
	needCluster(t)
	if os.Getenv(envNamed) != "1" {
		t.Skipf("%s=1 runs the named schedules", envNamed)
	}
	t.Parallel()
	bin := buildBin(t)
	for _, name := range guardNamed {
		t.Run(name, func(t *testing.T) { runGuard(t, bin, name) })
	}
}

func runGuard(t *testing.T, bin, name string) {
	o, res, log := runNamedKept(t, bin, name)
	if bad, err := ownRebootsBootWhatRan(nodesRoot(res.Dir), NodeNames(o.Nodes)); err != nil {
		t.Fatal(err)
	} else if len(bad) > 0 {
		t.Log(log.String())
		t.Errorf("a node's own reboot booted another release than it ran (logs in %s):\n  %s", res.Dir, strings.Join(bad, "\n  "))
	}
	if res.Failed() {
		t.Log(log.String())
		t.Fatalf("failed: replay with %s", res.Replay())
	}
	for _, want := range []string{"window closed while", "gave its slot back", "rebooted by itself with no slot", "window lifted"} {
		if !strings.Contains(res.Outcome, want) {
			t.Fatalf("outcome %q: the variant did not reach %q, so the case was not exercised", res.Outcome, want)
		}
	}
	if len(res.Strikes) != 1 || res.Strikes[0].Slot {
		t.Fatalf("strikes %+v: want one reboot of the deferred node, with no slot", res.Strikes)
	}
	if !strings.Contains(res.Outcome, "5/5 nodes at v2, 0 failures") {
		t.Fatalf("outcome %q: want every node at v2 with no failure", res.Outcome)
	}
}
