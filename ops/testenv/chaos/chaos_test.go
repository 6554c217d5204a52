package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/testenv/faults"
	"slipway.dev/slipway/ops/testenv/monitor"
)

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// buildBin builds slipway and slipway-sim, once for the package.
func buildBin(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "slipway-chaos-bin-"); binErr != nil {
			return
		}
		for pkg, name := range map[string]string{"../../../cmd/slipway": "slipway", "../cmd/slipway-sim": "slipway-sim"} {
			cmd := exec.Command("go", "build", "-trimpath", "-tags", "urfave_cli_no_docs", "-o", filepath.Join(binDir, name), pkg)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				binErr = fmt.Errorf("build %s: %w\n%s", name, err, out)
				return
			}
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func needCluster(t *testing.T) {
	t.Helper()
	if testing.Short() || os.Getenv(testenv.EnvSkip) == "1" {
		t.Skipf("no simulated cluster: %s=1 or -short", testenv.EnvSkip)
	}
}

// testKinds are the faults of make test's fixed seeds: process and network
// faults and a PDB closed for a while. The node faults (not-ready,
// reregister, stall-reboot) and the host, source and clock faults are
// left out for make test's time, not for a defect known open: a node held
// down or a host upgrade cut stretches a 12 s run into minutes of waiting
// for the rollout to settle. make chaos draws every kind and runs every
// named schedule after its seeds (SLIPWAY_CHAOS_NAMED=1 runs them here);
// make test reaches a clock step through TestClockStepShort*.
var testKinds = []faults.Kind{faults.Kill, faults.Pause, faults.Latency, faults.HalfOpen, faults.Partition, faults.Drop, faults.BlockEviction}

// TestK3osSeeds rolls v1 to v2 under a small fixed set of seeds' faults
// with the monitor watching: no invariant may break and the rollout must
// settle. A failure prints the schedule and the command that replays it.
func TestK3osSeeds(t *testing.T) {
	needCluster(t)
	t.Parallel()
	bin := buildBin(t)
	for _, seed := range []int64{1} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			runOK(t, Options{System: "k3os", Seed: seed, Duration: 12 * time.Second, Kinds: testKinds, Bin: bin})
		})
	}
}

// runOK runs o and fails the test on a violation, or a system that did
// not settle, printing the run's report with its replay command; it
// returns the run's result.
func runOK(t *testing.T, o Options) Result {
	t.Helper()
	var log bytes.Buffer
	o.ToolsDir, o.Log = os.Getenv(testenv.EnvToolsDir), &log
	res, err := Run(context.Background(), o)
	var rep bytes.Buffer
	res.Report(&rep)
	t.Log(rep.String())
	if err != nil {
		t.Log(log.String())
		t.Fatal(err)
	}
	if res.Failed() {
		t.Log(log.String())
		t.Fatalf("failed: replay with %s", res.Replay())
	}
	if res.Checks == 0 || len(res.Faults.Injected)+len(res.Faults.Armed) == 0 { // a power cut armed counts as applied, struck or not
		t.Fatalf("nothing checked (%d checks) or injected (%v, armed %v)", res.Checks, res.Faults.Injected, res.Faults.Armed)
	}
	return res
}

// TestScheduleFollowsTheSeed: the schedule printed for a replay is the one
// the seed draws again.
func TestScheduleFollowsTheSeed(t *testing.T) {
	o := Options{System: "k3os", Seed: 77, Duration: time.Minute, Nodes: 5}
	a, err := K3osSchedule(o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := K3osSchedule(o)
	if err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() || len(a) == 0 {
		t.Fatalf("seed 77 drew two schedules:\n%s---\n%s", a, b)
	}
	if got := (Result{System: "k3os", Seed: 77, Duration: time.Minute, Nodes: 5}).Replay(); got != "scripts/chaos --system k3os --seeds 1 --seed 77 --duration 1m0s --nodes 5" {
		t.Fatalf("replay %q", got)
	}
}

// TestExcused: a state invariant broken while a fault holds a named node
// down is excused; slipway's own cordon rules never are.
func TestExcused(t *testing.T) {
	start := time.Unix(1000, 0)
	sched := faults.Schedule{{At: 10 * time.Second, Kind: faults.NotReady, Target: "node/node-5", For: 5 * time.Second},
		{At: 25 * time.Second, Kind: faults.StallReboot, Target: "node/node-2", For: 8 * time.Second}}
	v := func(inv string, at time.Duration, msg string) monitor.Violation {
		return monitor.Violation{Invariant: inv, At: start.Add(at), Message: msg}
	}
	for _, tc := range []struct {
		v    monitor.Violation
		want bool
	}{
		{v(monitor.InvChannelConcurrency, 12*time.Second, "2 nodes unavailable: node-4 (cordoned by slipway-agent); node-5 (NotReady)"), true},
		{v(monitor.InvChannelConcurrency, 12*time.Second, "2 nodes unavailable: node-4 (cordoned by slipway-agent); node-3 (NotReady)"), false},
		{v(monitor.InvChannelConcurrency, 5*time.Second, "2 nodes unavailable: node-4 (cordoned by slipway-agent); node-5 (NotReady)"), false},
		{v(monitor.InvChannelConcurrency, time.Minute, "2 nodes unavailable: node-4 (cordoned by slipway-agent); node-5 (NotReady)"), false},
		{v(monitor.InvCordonBudget, 12*time.Second, "slipway cordoned node-4 while ...: node-5 (NotReady)"), false},
		{monitor.Violation{Invariant: monitor.InvRebootWithoutSlot, At: start.Add(32 * time.Second), Key: "node-2@b"}, true}, // the stall
		{monitor.Violation{Invariant: monitor.InvRebootWithoutSlot, At: start.Add(32 * time.Second), Key: "node-3@b"}, false},
		{monitor.Violation{Invariant: monitor.InvRebootWithoutSlot, At: start.Add(12 * time.Second), Key: "node-5@b"}, false},  // NotReady is no reboot
		{monitor.Violation{Invariant: monitor.InvRebootWithoutDrain, At: start.Add(32 * time.Second), Key: "node-2@b"}, false}, // a stalled reboot is still slipway's: drained first
	} {
		if got := Excused(tc.v, sched, nil, start); got != tc.want {
			t.Errorf("Excused(%s at %s: %s) = %t, want %t", tc.v.Invariant, tc.v.At.Sub(start), tc.v.Message, got, tc.want)
		}
	}
}

// envNamed, set to 1, runs the named schedules in TestNamedSchedules: a
// cluster more than make test's budget allows beside the fixed seed.
const envNamed = "SLIPWAY_CHAOS_NAMED"

// TestNamedSchedules runs the named schedules whose defects are fixed
// (SLIPWAY_CHAOS_NAMED=1; scripts/chaos --named NAME runs one).
func TestNamedSchedules(t *testing.T) {
	needCluster(t)
	if os.Getenv(envNamed) != "1" {
		t.Skipf("%s=1 runs the named schedules", envNamed)
	}
	t.Parallel()
	runNamed(t, "k3os-paused-leaders", "k3os-stalled-reboots", "k3os-notready-server", "k3os-notready-worker", "k3os-analysis-holds", "k3os-analysis-rollback")
}

// runNamed runs each named schedule as a subtest under runOK.
func runNamed(t *testing.T, names ...string) {
	bin := buildBin(t)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			o, err := NamedOptions(name)
			if err != nil {
				t.Fatal(err)
			}
			o.Bin = bin
			runOK(t, o)
		})
	}
}
