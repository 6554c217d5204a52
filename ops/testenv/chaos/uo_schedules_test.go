package chaos

import (
	"os"
	"strings"
	"testing"
)

// TestUpdateOperatorLostWrites runs the update operator's lost-answer
// schedules (SLIPWAY_CHAOS_NAMED=1, as the other named schedules): each
// must pass under the monitor and settle with every node at v2; its
// variant must have struck (the answer lost), or the case was not
// exercised.
func TestUpdateOperatorLostWrites(t *testing.T) {
	needCluster(t)
	if os.Getenv(envNamed) != "1" {
		t.Skipf("%s=1 runs the named schedules", envNamed)
	}
	t.Parallel()
	bin := buildBin(t)
	for _, name := range uoLostNamed {
		t.Run(name, func(t *testing.T) {
			o, res, log := runNamedKept(t, bin, name)
			if !strings.Contains(log.String(), "the answer lost") {
				t.Log(log.String())
				t.Fatalf("the variant never dropped the controllers' connections at a cordon: the case was not exercised")
			}
			if res.Failed() {
				t.Log(log.String())
				t.Fatalf("failed: replay with %s", res.Replay())
			}
			if want := "5/5 nodes at v2"; o.Nodes != 5 || !strings.Contains(res.Outcome, want) {
				t.Fatalf("outcome %q: want %q", res.Outcome, want)
			}
		})
	}
}
