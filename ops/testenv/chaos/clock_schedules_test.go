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
	bin := buildBin(t)
	for _, name := range clockNamed {
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
