package chaos

import (
	"os"
	"testing"

	"slipway.dev/slipway/ops/testenv/faults"
)

// TestClockSchedules runs the clock step schedules (SLIPWAY_CHAOS_NAMED=1):
// each must pass under the monitor, with every step injected.
func TestClockSchedules(t *testing.T) {
	needCluster(t)
	if os.Getenv(envNamed) != "1" {
		t.Skipf("%s=1 runs the named schedules", envNamed)
	}
	t.Parallel()
	runClockSteps(t, clockNamed...)
}

// TestClockStepShort is make test's clock step of k3os (its fixed seeds
// draw none, testKinds): the controllers 10 min ahead and two agents 10
// min behind for the rollout's first 15 s, under no-agent-while-renewing
// and every other rule.
func TestClockStepShort(t *testing.T) {
	needCluster(t)
	t.Parallel()
	runClockSteps(t, "k3os-clock-step-short")
}

// TestClockStepShortUpdateOperator is the same for the update operator.
func TestClockStepShortUpdateOperator(t *testing.T) {
	needCluster(t)
	t.Parallel()
	runClockSteps(t, "uo-clock-step-short")
}

// runClockSteps runs the named clock schedules one after the other; each
// must pass with every step injected.
func runClockSteps(t *testing.T, names ...string) {
	bin := buildBin(t)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			o, err := NamedOptions(name)
			if err != nil {
				t.Fatal(err)
			}
			o.Bin = bin
			res := runOK(t, o)
			if got, want := res.Faults.Injected[faults.ClockStep], len(o.Schedule); got != want {
				t.Fatalf("%d clock steps injected, want %d (skipped %v)", got, want, res.Faults.Skipped)
			}
		})
	}
}
