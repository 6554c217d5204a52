package chaos

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/testenv/faults"
	"slipway.dev/slipway/ops/testenv/hostcheck"
)

// The named schedules of a node that reboots by itself (faults.Reboot: a
// kernel panic, a power cycle, not asked by slipway), and what must hold
// then beyond the monitor's rules: a node that rebooted by itself after
// its swap is not drained and rebooted a second time (rebootsPerSlot).

func init() { maps.Copy(Schedules, rebootSchedules) }

// rebootNamed are the reboot schedules run by TestRebootSchedules.
var rebootNamed = []string{"k3os-self-reboot-after-swap", "k3os-failed-slot-then-site-reboot"}

// rebootRule is what a reboot schedule checks from the nodes' files once
// the run is over, beside the monitor and the host checks.
type rebootRule struct {
	// afterSwap: the node's own reboot comes right after its swap, so
	// slipway must not reboot it at all (rebootsPerSlot); otherwise once
	// at most.
	afterSwap bool
	// bootsWhatRan: each of the node's own reboots while it held no slot
	// boots the release it ran before (ownRebootsBootWhatRan): nothing was
	// left activated.
	// allStrike: every reboot of the schedule must strike (an armed one
	// whose step no upgrade reached proves nothing); otherwise one at least.
	allStrike    bool
	bootsWhatRan bool
}

// rebootRules are the rules of each reboot schedule.
var rebootRules = map[string]rebootRule{
	"k3os-self-reboot-after-swap":       {afterSwap: true, allStrike: true},
	"k3os-self-reboot-after-swap-short": {afterSwap: true},
	"k3os-failed-slot-then-site-reboot": {bootsWhatRan: true},
}

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
	// The same armed for the rollout's first 30 s only: the first slots'
	// nodes reboot by themselves (the slots' order follows the nodes' UIDs,
	// so every node is armed); make test's (TestSelfRebootAfterSwapShort).
	"k3os-self-reboot-after-swap-short": {System: "k3os", Nodes: 5,
		Doc:      "the first slots' nodes reboot by themselves right after their swap: no drain and no second reboot, the rollout ends at v2",
		Schedule: selfRebootAfter(30*time.Second, "current:kernel", 1, 2, 3, 4, 5)},
	// Evictions are blocked for the rollout's first 30 s, beyond the drain
	// timeout (20 s): the first slot's node swaps v2 in beside its drain,
	// the drain fails after about 20 s and the slot ends Failed,
	// uncordoned; its agent undoes the swap. At 32 s, before that slot's
	// retry (its backoff is 20 s), every node reboots by itself (a power
	// cycle of the whole site; the slots' order follows the nodes' UIDs,
	// so which node failed is not known beforehand): each node that held
	// no slot then must boot the release it ran (ownRebootsBootWhatRan),
	// the one whose slot failed above all, and nothing stays activated
	// without a slot (staged-without-slot). A guard: it passes
	// with plan.SlotLive undone in the agent's rollback check too (a
	// failed drain's rollback does not wait on that check); the window
	// deferral that check is for is not reached here.
	"k3os-failed-slot-then-site-reboot": {System: "k3os", Nodes: 5,
		Doc: "a slot failing after its swap (a drain blocked past its timeout), then every node reboots by itself: the nodes with no slot boot the release they ran, nothing left activated",
		Schedule: faults.Schedule{
			{At: 0, Kind: faults.BlockEviction, Target: "pdb/default/guarded", For: 30 * time.Second},
			{At: 32 * time.Second, Kind: faults.Reboot, Target: "node/node-1", For: 2 * time.Second},
			{At: 32 * time.Second, Kind: faults.Reboot, Target: "node/node-2", For: 2 * time.Second},
			{At: 32 * time.Second, Kind: faults.Reboot, Target: "node/node-3", For: 2 * time.Second},
			{At: 32 * time.Second, Kind: faults.Reboot, Target: "node/node-4", For: 2 * time.Second},
			{At: 32 * time.Second, Kind: faults.Reboot, Target: "node/node-5", For: 2 * time.Second},
		}},
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

// ownRebootsBootWhatRan checks, from the nodes' files under nodesRoot,
// that each reboot a node took by itself while it held no slot
// (faults.InjectedRebootsFile: its third field the boot it began, its
// fourth "slot=false") booted the rootfs and kernel of the boot before it.
// It returns one line per reboot that did not.
func ownRebootsBootWhatRan(nodesRoot string, nodes []string) ([]string, error) {
	var out []string
	for _, n := range nodes {
		dir := filepath.Join(nodesRoot, n)
		h, err := hostcheck.ReadHost(n, dir)
		if err != nil {
			return nil, err
		}
		b, err := os.ReadFile(filepath.Join(dir, faults.InjectedRebootsFile))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			w := strings.Fields(line)
			if len(w) < 4 || w[3] != "slot=false" {
				continue // within a slot the node may boot what the slot activated
			}
			i := slices.IndexFunc(h.Boots, func(x hostcheck.Boot) bool { return x.N == w[2] })
			switch {
			case i < 0:
				out = append(out, fmt.Sprintf("%s: its own reboot into boot %s is not in its boots log: %s", n, w[2], bootsLine(h)))
			case i == 0:
			case h.Boots[i].Rootfs != h.Boots[i-1].Rootfs || h.Boots[i].Kernel != h.Boots[i-1].Kernel:
				out = append(out, fmt.Sprintf("%s: its own reboot booted rootfs %s kernel %s, having run rootfs %s kernel %s (boot %s): %s",
					n, h.Boots[i].Rootfs, h.Boots[i].Kernel, h.Boots[i-1].Rootfs, h.Boots[i-1].Kernel, h.Boots[i-1].N, bootsLine(h)))
			}
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

// slotHolders are the nodes holding a slot of the run's channel now.
func (s *k3os) slotHolders(ctx context.Context) ([]string, error) {
	ch, err := s.oc.OpsV1().UpdateChannels(k3osNS).Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return slotNodes(ch), nil
}
