package chaos

import (
	"os"
	"regexp"
	"testing"
)

// TestStaleSchedules runs the stale-view schedule (SLIPWAY_CHAOS_NAMED=1,
// as the other named schedules): a node frozen in its reboot delay loses
// its slot while the controller's view writes are held, and is thawed
// once another node holds a slot. It must pass under the monitor (no
// reboot-without-slot, nothing beyond the channel's budget), and the
// variant must have reached every step of the case: the node frozen, its
// slot taken away while its view still gave it the slot, another node
// granted only once the view no longer did, the node thawed and not
// rebooted before it held a slot again, and a write of its view held by
// the API server.
func TestStaleSchedules(t *testing.T) {
	needCluster(t)
	if os.Getenv(envNamed) != "1" {
		t.Skipf("%s=1 runs the named schedules", envNamed)
	}
	t.Parallel()
	bin := buildBin(t)
	for _, name := range staleNamed {
		t.Run(name, func(t *testing.T) {
			_, res, log := runNamedKept(t, bin, name)
			if res.Failed() {
				t.Log(log.String())
				t.Fatalf("failed: replay with %s", res.Replay())
			}
			for _, want := range []string{
				`node-\d frozen in its reboot delay`,
				`node-\d's slot taken away \(.*\); its view still gives it the slot: true`,
				`node-\d granted a slot [^;]* after node-\d's was taken away; node-\d's view still gives it the slot: false`,
				`node-\d thawed`,
				`node-\d rebooted with no slot after its thaw: false \(a slot again: (true|false)\); view writes no longer held; node-\d's held: \[[^]]*UPDATE nodeupdates`,
			} {
				if !regexp.MustCompile(want).MatchString(res.Outcome) {
					t.Log(log.String())
					t.Fatalf("outcome %q: the variant did not reach %q, so the case was not exercised", res.Outcome, want)
				}
			}
		})
	}
}
