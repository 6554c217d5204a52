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
	"slipway.dev/slipway/ops/testenv/monitor"
)

// struck says what a host schedule's outcome lacks to show that its faults
// struck ("": nothing): every armed power cut cut (an armed step no upgrade
// reached proves nothing), a full disk failed a staging, the source failed
// some answers.
func struck(name, outcome string) string {
	for _, c := range []struct{ name, want, not string }{
		{"k3os-power-cut-swap", "host faults struck map[power-cut:3]", ""},
		{"k3os-power-cut-staging", "host faults struck map[power-cut:2]", ""},
		{"k3os-power-cut-rollback", "host faults struck map[power-cut:", ""},
		{"k3os-full-disk", "no space", "no space 0,"},
		{"k3os-source-faults", "requests", " 0 failed"},
	} {
		if c.name == name && (!strings.Contains(outcome, c.want) || c.not != "" && strings.Contains(outcome, c.not)) {
			return fmt.Sprintf("want %q in it, not %q", c.want, c.not)
		}
	}
	return ""
}

// TestHostSchedules runs the host faults' named schedules (power cuts in
// the host upgrade, a full disk, a faulty release source) under the
// monitor and the host checks (SLIPWAY_CHAOS_NAMED=1, as the other named
// schedules: a cluster each, beyond make test's budget).
func TestHostSchedules(t *testing.T) {
	needCluster(t)
	if os.Getenv(envNamed) != "1" {
		t.Skipf("%s=1 runs the named schedules", envNamed)
	}
	t.Parallel()
	bin := buildBin(t)
	for _, name := range hostNamed {
		t.Run(name, func(t *testing.T) {
			o, err := NamedOptions(name)
			if err != nil {
				t.Fatal(err)
			}
			o.Bin, o.ToolsDir = bin, os.Getenv(testenv.EnvToolsDir)
			var log bytes.Buffer
			o.Log = &log
			res, err := Run(context.Background(), o)
			var rep bytes.Buffer
			res.Report(&rep)
			t.Log(rep.String())
			if err != nil || res.Failed() {
				t.Log(log.String())
				t.Fatalf("failed (%v): replay with %s", err, res.Replay())
			}
			if res.Checks == 0 {
				t.Fatal("the monitor checked nothing")
			}
			if why := struck(name, res.Outcome); why != "" {
				t.Log(log.String())
				t.Fatalf("the host faults did not all strike: outcome %q: %s", res.Outcome, why)
			}
		})
	}
}

// TestExcusedPowerCut: a state invariant broken while a power cut that
// struck has the node down (from the strike to its return, plus
// faultGrace) is excused, as for NotReady, and so is the cut's reboot for
// reboot-without-drain and reboot-without-slot; an armed cut that never
// struck, or the time before the strike, excuses nothing; slipway's own
// cordon rules never are.
func TestExcusedPowerCut(t *testing.T) {
	start := time.Unix(1000, 0)
	sched := faults.Schedule{{At: 0, Kind: faults.PowerCut, Target: "node/node-5", For: time.Minute, Step: "staged"},
		{At: 0, Kind: faults.PowerCut, Target: "node/node-4", For: time.Minute, Step: "staged"}}
	strikes := []faults.Strike{{Kind: faults.PowerCut, Node: "node-5", At: start.Add(20 * time.Second), Back: start.Add(25 * time.Second)}}
	msg := func(node string) string {
		return "2 nodes unavailable: node-3 (cordoned by slipway-agent); " + node + " (NotReady)"
	}
	for _, tc := range []struct {
		inv, node string
		at        time.Duration
		want      bool
	}{
		{monitor.InvChannelConcurrency, "node-5", 30 * time.Second, true},
		{monitor.InvChannelConcurrency, "node-5", 20 * time.Second, true},
		{monitor.InvChannelConcurrency, "node-5", 10 * time.Second, false}, // armed, not struck yet
		{monitor.InvChannelConcurrency, "node-5", 41 * time.Second, false}, // back + faultGrace passed
		{monitor.InvChannelConcurrency, "node-4", 30 * time.Second, false}, // armed, never struck
		{monitor.InvControlPlane, "node-5", 30 * time.Second, true},
		{monitor.InvCordonBudget, "node-5", 30 * time.Second, false},
		{monitor.InvRebootWithoutSlot, "node-5", 25 * time.Second, true},
		{monitor.InvRebootWithoutSlot, "node-4", 25 * time.Second, false},
		{monitor.InvRebootWithoutDrain, "node-5", 25 * time.Second, true}, // the cut's reboot: no drain precedes a power loss
		{monitor.InvRebootWithoutDrain, "node-5", 10 * time.Second, false},
		{monitor.InvRebootWithoutDrain, "node-4", 25 * time.Second, false},
	} {
		v := monitor.Violation{Invariant: tc.inv, At: start.Add(tc.at), Message: msg(tc.node), Key: tc.node + "@b"}
		if got := Excused(v, sched, strikes, start); got != tc.want {
			t.Errorf("Excused(%s of %s at %s) = %t, want %t", tc.inv, tc.node, tc.at, got, tc.want)
		}
	}
}

// TestHostSchedulesNamed: every host schedule, passing or pending, is a
// named schedule of the k3os system that scripts/chaos --named can run.
func TestHostSchedulesNamed(t *testing.T) {
	for _, name := range append(append([]string{}, hostNamed...), hostPending...) {
		o, err := NamedOptions(name)
		if err != nil || o.System != "k3os" || len(o.Schedule) == 0 || o.Duration <= 0 {
			t.Errorf("%s: %+v %v", name, o, err)
		}
	}
	if len(hostNamed)+len(hostPending) != len(hostSchedules) {
		t.Errorf("%d host schedules, %d listed as passing or pending", len(hostSchedules), len(hostNamed)+len(hostPending))
	}
}
