package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A Reboot fault is a node rebooting by itself (a kernel panic, a power
// cycle, a watchdog), not asked by slipway: its processes are killed at
// once and it boots through the same path as a power cut or slipway's own
// reboot (testenv.Env.Reboot: NotReady, /run emptied, a new boot ID, the
// node's boot script again, so `slipway ops boot` and the loader run).
//
//   - With no Step it strikes at its offset and the node stays down For.
//   - With a Step it is armed for For, as a PowerCut, through the same
//     crash hook (FaultFile): the host upgrade or rollback that reaches
//     Step stops itself there; unlike a power cut the node's agent is
//     killed first, then the upgrade is let go on to its end (the step
//     and what follows it complete), and only then does the node reboot,
//     for the default downtime (Sim.RebootDelay).
//
// Each reboot the injector causes appends a line to the node's
// InjectedRebootsFile ("<unix nanoseconds> <boot ID after it> <the boot
// count it began> slot=<whether it held a slot then>"), so that a check
// can tell the node's own reboots from those slipway asked for.

// InjectedRebootsFile lists, in a node's directory, the reboots a Reboot
// fault caused there.
const InjectedRebootsFile = "injected-reboots"

// upgradeExitWait bounds how long an armed Reboot waits for the upgrade it
// let go on to end before rebooting the node anyway.
const upgradeExitWait = 30 * time.Second

// rebootNow reboots the node of f now, down for f.For, and returns once it
// is back: a heal that waits for it.
func (s *Sim) rebootNow(ctx context.Context, f Fault) (func(context.Context) error, error) {
	node, _, err := s.hostFile(f)
	if err != nil {
		return nil, err
	}
	if ok, err := s.Env.Supervisor.Signal(node, syscall.SIGKILL); err != nil {
		return nil, fmt.Errorf("%s: %w", f, err)
	} else if !ok {
		return nil, ErrSkip // rebooting already, or its command not running
	}
	done := make(chan struct{})
	var rerr error
	go func() {
		defer close(done)
		rerr = s.rebootNode(context.WithoutCancel(ctx), node, f.For, "at its offset")
	}()
	return func(context.Context) error { <-done; return rerr }, nil
}

// armReboot arms a Reboot at f.Step until healed (see the type's comment).
func (s *Sim) armReboot(ctx context.Context, f Fault) (func(context.Context) error, error) {
	return s.armAtStep(ctx, f, s.rebootAfterStep)
}

// rebootAfterStep: the agent of node is killed (it cannot see the upgrade
// end nor ask for a reboot of its own), the upgrade stopped at step (its
// pid in fired) goes on to its end, then the node reboots.
func (s *Sim) rebootAfterStep(ctx context.Context, node, step string, fired []byte) error {
	w := strings.Fields(string(fired))
	pid := 0
	if len(w) > 0 {
		pid, _ = strconv.Atoi(w[0])
	}
	if _, err := s.Env.Supervisor.Signal(node, syscall.SIGKILL); err != nil {
		return fmt.Errorf("reboot of %s after %s: %w", node, step, err)
	}
	if pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGCONT)
		waitExit(ctx, pid, upgradeExitWait)
	}
	delay := s.RebootDelay
	if delay <= 0 {
		delay = time.Second
	}
	s.count(Reboot)
	return s.rebootNode(ctx, node, delay, fmt.Sprintf("after step %s (pid %d, let go on to its end)", step, pid))
}

// rebootNode reboots node (its command already killed), down for delay,
// and records the strike.
func (s *Sim) rebootNode(ctx context.Context, node string, delay time.Duration, why string) error {
	if delay <= 0 {
		delay = time.Second
	}
	at := time.Now()
	slot := false
	if s.SlotHolders != nil {
		holders, err := s.SlotHolders(ctx)
		if err != nil {
			return fmt.Errorf("reboot of %s by itself: who holds a slot: %w", node, err)
		}
		slot = slices.Contains(holders, node)
	}
	s.log("node %s reboots by itself %s (slot held: %t)", node, why, slot)
	if err := s.Env.Reboot(ctx, node, delay); err != nil {
		return fmt.Errorf("reboot of %s by itself: %w", node, err)
	}
	st := Strike{Kind: Reboot, Node: node, At: at, Back: time.Now(), Boot: s.Env.Supervisor.Boots(node), Slot: slot}
	if s.Client != nil {
		if n, err := s.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil {
			st.BootID = n.Status.NodeInfo.BootID
		}
	}
	s.struck(st)
	line := fmt.Sprintf("%d %s %d slot=%t\n", at.UnixNano(), st.BootID, st.Boot, st.Slot)
	if f, err := os.OpenFile(filepath.Join(s.Env.NodeDir(node), InjectedRebootsFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		_, _ = f.WriteString(line)
		_ = f.Close()
	}
	s.log("node %s back from its own reboot (boot ID %s)", node, st.BootID)
	return nil
}

// waitExit waits until process pid is gone (or a zombie), at most limit.
func waitExit(ctx context.Context, pid int, limit time.Duration) {
	end := time.Now().Add(limit)
	for time.Now().Before(end) && ctx.Err() == nil {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			if i := strings.LastIndexByte(string(b), ')'); i > 0 && i+2 < len(b) && b[i+2] == 'Z' {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}
