package chaos

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"slipway.dev/slipway/ops/testenv/faults"
	"slipway.dev/slipway/ops/testenv/hostcheck"
)

// The named schedules of a node that reboots by itself (faults.Reboot: a
// kernel panic, a power cycle, not asked by slipway), and what must hold
// then beyond the monitor's rules: a node that rebooted by itself after
// its swap is not drained and rebooted a second time (rebootsPerSlot).

func init() { maps.Copy(Schedules, rebootSchedules) }

// rebootNamed are the reboot schedules run by TestRebootSchedules.
var rebootNamed = []string{"k3os-self-reboot-after-swap"}

// rebootSchedules are the schedules of a node rebooting by itself.
var rebootSchedules = map[string]Named{
	// Every node reboots by itself right after its upgrade Job's swap (its
	// last link, current:kernel): the Job completes, the agent is killed
	// with the node and the node boots v2 on a new boot ID, its slot still
	// Upgrading or Draining. It must end at v2, uncordoned, with no drain
	// and no second reboot (rebootsPerSlot: its one reboot is its own).
	// Before the fix the agent drained the node it found running the
	// target and rebooted it again.
	"k3os-self-reboot-after-swap": {System: "k3os", Nodes: 5,
		Doc:      "every node reboots by itself right after its swap: no drain and no second reboot (one boot per slot, the node's own), the rollout ends at v2",
		Schedule: selfRebootAfter(armed, "current:kernel", 1, 2, 3, 4, 5)},
	// The same for the first slot's node alone, armed for the rollout's
	// first 30 s: make test's (TestSelfRebootAfterSwapShort).
	"k3os-self-reboot-after-swap-short": {System: "k3os", Nodes: 5,
		Doc:      "the first slot's node reboots by itself right after its swap: no drain and no second reboot, the rollout ends at v2",
		Schedule: selfRebootAfter(30*time.Second, "current:kernel", 1)},
}

// selfRebootAfter arms a reboot of each node right after step, for span.
func selfRebootAfter(span time.Duration, step string, nodes ...int) faults.Schedule {
	var out faults.Schedule
	for _, n := range nodes {
		out = append(out, faults.Fault{At: 0, Kind: faults.Reboot, Target: fmt.Sprintf("node/node-%d", n), For: span, Step: step})
	}
	return out
}

// rebootsPerSlot checks, from the nodes' files under nodesRoot once a run
// is over, that no node rebooted more often than one slot's reboot allows
// beside the reboots it took by itself (faults.InjectedRebootsFile): at
// most one reboot of slipway's per node (a run grants each node one slot),
// none on a node that rebooted by itself after its swap. It returns one
// line per node that broke it.
func rebootsPerSlot(nodesRoot string, nodes []string, ownAfterSwap bool) ([]string, error) {
	var out []string
	for _, n := range nodes {
		dir := filepath.Join(nodesRoot, n)
		h, err := hostcheck.ReadHost(n, dir)
		if err != nil {
			return nil, err
		}
		own, err := countLines(filepath.Join(dir, faults.InjectedRebootsFile))
		if err != nil {
			return nil, err
		}
		slipway := len(h.Boots) - 1 - own
		allowed := 1
		if ownAfterSwap && own > 0 {
			allowed = 0
		}
		if slipway > allowed {
			out = append(out, fmt.Sprintf("%s booted %d times: %d reboots of its own, %d of slipway's (at most %d): %s",
				n, len(h.Boots), own, slipway, allowed, bootsLine(h)))
		}
	}
	return out, nil
}

func bootsLine(h hostcheck.Host) string {
	var parts []string
	for _, b := range h.Boots {
		parts = append(parts, fmt.Sprintf("%s:rootfs=%s", b.N, b.Rootfs))
	}
	return strings.Join(parts, " ")
}

// countLines counts the lines of the file at path (0 when absent).
func countLines(path string) (int, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) != "" {
			n++
		}
	}
	return n, sc.Err()
}

// nodesRoot is where a kept run's nodes' directories are (testenv's
// NodesRoot under the run's directory).
func nodesRoot(runDir string) string { return filepath.Join(runDir, "env", "nodes") }
