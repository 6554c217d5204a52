package chaos

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// TestEDSSeeds rolls three templates of an ExtendedDaemonSet under a
// fixed seed's faults with the monitor watching.
func TestEDSSeeds(t *testing.T) {
	needCluster(t)
	t.Parallel()
	bin := buildBin(t)
	for _, seed := range []int64{1} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			runOK(t, Options{System: "eds", Seed: seed, Duration: 10 * time.Second, Kinds: testKinds, Bin: bin})
		})
	}
}

// TestSwarmSeeds runs the swarm's workers and applications under a fixed
// seed's faults with the monitor judging what the applications run.
func TestSwarmSeeds(t *testing.T) {
	needCluster(t)
	t.Parallel()
	bin := buildBin(t)
	for _, seed := range []int64{1} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			runOK(t, Options{System: "swarm", Seed: seed, Duration: 10 * time.Second, Kinds: testKinds, Bin: bin})
		})
	}
}

// TestNamedSchedulesEDSAndSwarm runs the named schedules of the update
// operator, ExtendedDaemonSet and swarm cases (SLIPWAY_CHAOS_NAMED=1).
func TestNamedSchedulesEDSAndSwarm(t *testing.T) {
	needCluster(t)
	if os.Getenv(envNamed) != "1" {
		t.Skipf("%s=1 runs the named schedules", envNamed)
	}
	t.Parallel()
	runNamed(t, "uo-release-fails-everywhere", "uo-notready-after-update", "uo-analysis-holds", "eds-canary-replicas-zero", "eds-canary-node-leaves", "eds-refused-restore", "swarm-sigstop-worker", "swarm-force-deleted-pod")
}

// TestUpdateOperatorSeeds rolls v1 to v2 with the update operator under a
// fixed seed's faults with the monitor watching.
func TestUpdateOperatorSeeds(t *testing.T) {
	needCluster(t)
	t.Parallel()
	bin := buildBin(t)
	for _, seed := range []int64{1} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			runOK(t, Options{System: "update-operator", Seed: seed, Duration: 10 * time.Second, Kinds: testKinds, Bin: bin})
		})
	}
}
