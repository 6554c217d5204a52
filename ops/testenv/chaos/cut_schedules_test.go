package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/testenv/faults"
)

// TestCutSchedules runs the schedule of a rollback after a swap cut
// between its links (SLIPWAY_CHAOS_NAMED=1, as the other named
// schedules): an upgrade killed after the rootfs's current link with its
// node up, the agent's rollback of that node cut by a power loss between
// its own links. It must pass under the monitor and the host checks (no
// mixed-boot: the node boots one whole release), the kill and the power
// cut must both strike on the same node, and the rollout must end at v2.
func TestCutSchedules(t *testing.T) {
	needCluster(t)
	if os.Getenv(envNamed) != "1" {
		t.Skipf("%s=1 runs the named schedules", envNamed)
	}
	t.Parallel()
	bin := buildBin(t)
	for _, name := range cutNamed {
		t.Run(name, func(t *testing.T) {
			o, err := NamedOptions(name)
			if err != nil {
				t.Fatal(err)
			}
			var log bytes.Buffer
			o.Bin, o.ToolsDir, o.Log = bin, os.Getenv(testenv.EnvToolsDir), &log
			start := time.Now()
			res, err := Run(context.Background(), o)
			var rep bytes.Buffer
			res.Report(&rep)
			t.Log(rep.String())
			t.Logf("%s: %s", name, time.Since(start).Round(time.Second))
			if err != nil || res.Failed() {
				t.Log(log.String())
				t.Fatalf("failed (%v): replay with %s", err, res.Replay())
			}
			if res.Checks == 0 {
				t.Fatal("the monitor checked nothing")
			}
			killed := killedNode(log.String())
			if killed == "" {
				t.Log(log.String())
				t.Fatalf("no upgrade was killed after step %s: the swap was never cut", killMidSwapStep)
			}
			cut := false
			for _, st := range res.Strikes {
				cut = cut || st.Kind == faults.PowerCut && st.Node == killed
			}
			if !cut {
				t.Log(log.String())
				t.Fatalf("no power cut struck %s's rollback at %s (strikes %+v): the rollback was not cut", killed, cutRollbackStep, res.Strikes)
			}
			if want := fmt.Sprintf("%d/%d nodes at v2", o.Nodes, o.Nodes); !strings.Contains(res.Outcome, want) {
				t.Fatalf("outcome %q: want %q", res.Outcome, want)
			}
		})
	}
}

// killedNode is the node whose upgrade the kill-upgrade-mid-swap variant
// killed, read from the run's log ("": none).
func killedNode(log string) string {
	for _, line := range strings.Split(log, "\n") {
		if _, rest, ok := strings.Cut(line, "killed "); ok {
			if node, _, ok := strings.Cut(rest, "'s upgrade (pid "); ok {
				return node
			}
		}
	}
	return ""
}

// TestCutSchedulesNamed: the cut schedules are named schedules of the
// k3os system with a variant the k3os system knows.
func TestCutSchedulesNamed(t *testing.T) {
	for _, name := range cutNamed {
		o, err := NamedOptions(name)
		if err != nil || o.System != "k3os" || len(o.Schedule) == 0 || o.Duration <= 0 {
			t.Errorf("%s: %+v %v", name, o, err)
		}
		if _, ok := k3osVariants[o.Variant]; !ok {
			t.Errorf("%s: variant %q is not a k3os variant", name, o.Variant)
		}
	}
	if len(cutNamed) != len(cutSchedules) {
		t.Errorf("%d cut schedules, %d run by TestCutSchedules", len(cutSchedules), len(cutNamed))
	}
	if got := killedNode("12:00:01 killed node-3's upgrade (pid 42) after step current:k3os, its node up"); got != "node-3" {
		t.Errorf("killedNode = %q, want node-3", got)
	}
}
