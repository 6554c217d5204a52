package chaos

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"slipway.dev/slipway/ops/testenv/faults"
)

// The named schedule of a rollback that follows a swap cut between its
// links (k3os-rollback-after-cut-swap). A power cut between two links
// never reaches it: the node reboots, and its loader finishes the cut
// swap before anything reads the links. What reaches it is an upgrade
// process that dies between two links while the node stays up (an OOM
// kill, a pod killed by its runtime): the swap's journal stays pending,
// rootfs current at v2 and kernel current still at v1. The upgrade Job
// fails, the slot ends Failed, and the agent undoes the swap with a
// rollback Job of the components whose current differs from what runs:
// the rootfs alone. That rollback must undo the cut swap whole (the
// kernel the journal was going to move with it); rolling back the rootfs
// alone after finishing the journal leaves rootfs v1 with kernel v2 on
// disk, which the node's next boot starts (mixed-boot). The rollback is
// cut by a power loss between its own links, so that the node boots what
// it left at once, before the slot's retry swaps v2 in again.

func init() {
	maps.Copy(Schedules, cutSchedules)
	k3osVariants[variantKillMidSwap] = (*k3os).startKillMidSwap
}

// k3osVariants are the k3os variants kept in files of their own, by name
// (startVariant starts them).
var k3osVariants = map[string]func(s *k3os, ctx context.Context, h *harness) (stop func(), err error){}

// variantKillMidSwap is the k3os variant that kills the first slot's
// upgrade process between two links of its swap, then arms a power cut
// at a link of that node's rollback.
const variantKillMidSwap = "kill-upgrade-mid-swap"

// killMidSwapStep is the swap's step after which the upgrade process is
// killed: rootfs current moved, kernel previous and current not yet.
const killMidSwapStep = "current:k3os"

// cutRollbackStep is the rollback's step after which the node loses its
// power: one the rollback reaches whether it rolls back the rootfs alone
// or the rootfs and the kernel.
const cutRollbackStep = "rollback:current:k3os"

// cutNamed are the schedules TestCutSchedules runs.
var cutNamed = []string{"k3os-rollback-after-cut-swap"}

var cutSchedules = map[string]Named{
	// The first slot's upgrade process is killed after the rootfs's
	// current link (the node stays up), and a power cut is armed at
	// that node's rollback, between its links. The release source answers
	// 10 ms late for 150 s: a fault that keeps the schedule open while
	// the variant's own faults strike (their strikes count only until the
	// schedule ends). Before the whole-swap rollback it failed mixed-boot:
	// the node booted rootfs v1 with kernel v2.
	"k3os-rollback-after-cut-swap": {System: "k3os", Nodes: 5, Variant: variantKillMidSwap,
		Doc: "an upgrade killed between its links (node up), its swap rolled back by the agent and that rollback cut by a power loss: the node boots one whole release (mixed-boot)",
		Schedule: faults.Schedule{
			{At: 0, Kind: faults.SlowSource, Target: k3osSource, For: armed, Arg: 10 * time.Millisecond},
		}},
}

// killMidSwap is the state of the kill-upgrade-mid-swap variant.
type killMidSwap struct {
	mu sync.Mutex
	// node is the node whose upgrade was killed ("" : none yet).
	node string
	// heal disarms the power cut armed at node's rollback.
	heal func(context.Context) error
}

// startKillMidSwap arms every node's crash hook at killMidSwapStep: the
// first upgrade to reach it stops itself there, and is killed (SIGKILL,
// its process group) with its node left up; the others are disarmed. A
// power cut is then armed, through the run's fault injector, at
// cutRollbackStep on that node.
func (s *k3os) startKillMidSwap(ctx context.Context, h *harness) (stop func(), err error) {
	for _, n := range h.nodes {
		if err := os.WriteFile(filepath.Join(h.env.NodeDir(n), faults.FaultFile), []byte(killMidSwapStep+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("arm the kill of %s's upgrade: %w", n, err)
		}
	}
	k := &killMidSwap{}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.watch(cctx, s, h)
	}()
	return func() {
		cancel()
		<-done
		k.mu.Lock()
		heal := k.heal
		k.mu.Unlock()
		if heal != nil {
			if err := heal(context.Background()); err != nil {
				h.logf("power cut at %s's rollback: %v", k.node, err)
			}
		}
	}, nil
}

// watch waits for the first node's upgrade to stop at killMidSwapStep,
// kills it, disarms the others and arms the power cut at that node's
// rollback.
func (k *killMidSwap) watch(ctx context.Context, s *k3os, h *harness) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			k.disarm(h, "")
			return
		case <-tick.C:
		}
		for _, n := range h.nodes {
			fired := filepath.Join(h.env.NodeDir(n), faults.FaultFile+".fired")
			b, err := os.ReadFile(fired)
			if err != nil {
				continue
			}
			pid := killStopped(b)
			_ = os.Remove(fired)
			k.disarm(h, n)
			h.logf("killed %s's upgrade (pid %d) after step %s, its node up: the swap's journal left pending", n, pid, killMidSwapStep)
			// The injector is set as the faults start, long before a
			// slot's upgrade reaches its swap.
			sim := s.injector()
			if sim == nil {
				h.logf("arm the power cut at %s's rollback: no injector yet", n)
				return
			}
			heal, err := sim.Inject(ctx, faults.Fault{Kind: faults.PowerCut, Target: "node/" + n, For: armed, Step: cutRollbackStep})
			if err != nil {
				h.logf("arm the power cut at %s's rollback: %v", n, err)
				return
			}
			h.logf("power cut armed at %s's rollback step %s", n, cutRollbackStep)
			k.mu.Lock()
			k.node, k.heal = n, heal
			k.mu.Unlock()
			return
		}
	}
}

// disarm removes the kill's arming from every node but keep.
func (k *killMidSwap) disarm(h *harness, keep string) {
	for _, n := range h.nodes {
		if n == keep {
			continue
		}
		if err := os.Remove(filepath.Join(h.env.NodeDir(n), faults.FaultFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			h.logf("disarm the kill of %s's upgrade: %v", n, err)
		}
	}
}

// killStopped kills the process that stopped itself at a step (fired:
// "<pid> <step>") with its process group, and returns its pid (0: none).
func killStopped(fired []byte) int {
	w := strings.Fields(string(fired))
	if len(w) == 0 {
		return 0
	}
	pid, err := strconv.Atoi(w[0])
	if err != nil || pid <= 1 {
		return 0
	}
	if pgid, err := syscall.Getpgid(pid); err == nil && pgid > 1 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	return pid
}
