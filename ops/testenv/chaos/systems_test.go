package chaos

import (
	"fmt"
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
			runOK(t, Options{System: "eds", Seed: seed, Duration: 15 * time.Second, Kinds: testKinds, Bin: bin})
		})
	}
}
