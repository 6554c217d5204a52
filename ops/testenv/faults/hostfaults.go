package faults

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The host faults (PowerCut, FullDisk) are armed through the crash-safety
// hook of `slipway ops upgrade` and `ops rollback` (--test-crash-at,
// SLIPWAY_TEST_CRASH_AT): a simulated node's processes (its agent's
// command and the upgrade Jobs' pods, both run in the node's directory)
// get HostFaultEnv, and the fault writes FaultFile in the node's directory:
//   - "STEP" (PowerCut): the upgrade or rollback that reaches STEP claims
//     the file, writes FaultFile.fired with its pid and stops itself
//     (SIGSTOP), writing nothing more; Sim then cuts the node's power: its
//     agent and that process are killed at once (no SIGTERM, no grace) and
//     the node reboots, booting what is on disk (its loader finishes a swap
//     cut between two links);
//   - "enospc STEP" (FullDisk): every staging fails at STEP with ENOSPC
//     while the file is there.

// FaultFile arms a host fault, in a node's directory.
const FaultFile = "host-fault"

// HostFaultEnv is what a simulated node's processes need in their
// environment for the host faults.
const HostFaultEnv = "SLIPWAY_TEST_CRASH_AT=@" + FaultFile

// DefaultFullDiskStep is where a FullDisk fails staging when its Step is empty.
const DefaultFullDiskStep = "staged"

// Fired counts the host faults that struck (a PowerCut armed whose step
// no upgrade reached in its time did not), by kind.
func (s *Sim) Fired() map[Kind]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[Kind]int{}
	for k, n := range s.fired {
		out[k] = n
	}
	return out
}

// Strike is a fault that took a node down and up again: a PowerCut whose
// step was reached, or a Reboot (armed or immediate) that happened.
type Strike struct {
	Kind Kind
	Node string
	// At is when the node went down; Back when it was up again (or the
	// fault gave up).
	At, Back time.Time
	// BootID is the node's boot ID once back ("" when it was not read:
	// a power cut's is not).
	BootID string
	// Boot is the node's boot count once back (the boot it began).
	Boot int
	// Slot: the node held a slot when it went down (Sim.SlotHolders; a
	// Reboot's only).
	Slot bool
}

// Strikes are the faults that struck, in the order they ended.
func (s *Sim) Strikes() []Strike {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Strike(nil), s.strikes...)
}

func (s *Sim) struck(st Strike) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.strikes = append(s.strikes, st)
}

func (s *Sim) count(k Kind) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fired == nil {
		s.fired = map[Kind]int{}
	}
	s.fired[k]++
}

func (s *Sim) log(format string, a ...any) {
	if s.Log != nil {
		s.Log(fmt.Sprintf(format, a...))
	}
}

// hostFile is the node of a node/<name> target and its fault file.
func (s *Sim) hostFile(f Fault) (node, file string, err error) {
	node, ok := strings.CutPrefix(f.Target, "node/")
	if !ok {
		return "", "", fmt.Errorf("%s wants a node/<name> target", f.Kind)
	}
	if s.Env == nil || s.Env.Supervisor == nil {
		return "", "", fmt.Errorf("%s: the Env has no simulated nodes", f.Kind)
	}
	return node, filepath.Join(s.Env.NodeDir(node), FaultFile), nil
}

// fillDisk arms a full disk until healed.
func (s *Sim) fillDisk(f Fault) (func(context.Context) error, error) {
	_, file, err := s.hostFile(f)
	if err != nil {
		return nil, err
	}
	step := f.Step
	if step == "" {
		step = DefaultFullDiskStep
	}
	if err := os.WriteFile(file, []byte("enospc "+step+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("arm %s: %w", f, err)
	}
	return func(context.Context) error {
		if err := os.Remove(file); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("disarm %s: %w", f, err)
		}
		return nil
	}, nil
}

// armPowerCut arms a power cut at f.Step until healed; a watcher cuts the
// power when the step is reached. Healing disarms it, waiting for a cut
// under way to finish (the node back).
func (s *Sim) armPowerCut(ctx context.Context, f Fault) (func(context.Context) error, error) {
	return s.armAtStep(ctx, f, s.cut)
}

// armAtStep arms the crash hook at f.Step until healed: a watcher calls
// strike (with the node, the step and the fired file's "<pid> <step>")
// once the upgrade or rollback that reached the step stopped itself there.
// Healing disarms it, waiting for a strike under way to finish.
func (s *Sim) armAtStep(ctx context.Context, f Fault, strike func(ctx context.Context, node, step string, fired []byte) error) (func(context.Context) error, error) {
	node, file, err := s.hostFile(f)
	if err != nil {
		return nil, err
	}
	fired := file + ".fired"
	_ = os.Remove(fired)
	if err := os.WriteFile(file, []byte(f.Step+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("arm %s: %w", f, err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	var strikeErr error
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			b, err := os.ReadFile(fired)
			if err != nil {
				continue
			}
			strikeErr = strike(context.WithoutCancel(ctx), node, f.Step, b)
			_ = os.Remove(fired)
			return
		}
	}()
	var once sync.Once
	return func(context.Context) error {
		once.Do(func() { close(stop) })
		<-done
		if err := os.Remove(file); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("disarm %s: %w", f, err)
		}
		return strikeErr
	}, nil
}

// cut kills node's agent and the process that stopped at step (its pid in
// fired: "<pid> <step>") at once, then reboots the node.
func (s *Sim) cut(ctx context.Context, node, step string, fired []byte) error {
	at := time.Now()
	w := strings.Fields(string(fired))
	pid := 0
	if len(w) > 0 {
		pid, _ = strconv.Atoi(w[0])
	}
	// Power off: every process of the node dies at the same instant, the
	// agent first so that it cannot see the upgrade's end.
	if _, err := s.Env.Supervisor.Signal(node, syscall.SIGKILL); err != nil {
		return fmt.Errorf("power cut of %s: %w", node, err)
	}
	if pid > 0 {
		if pgid, err := syscall.Getpgid(pid); err == nil && pgid > 1 {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	s.count(PowerCut)
	defer func() { s.struck(Strike{Kind: PowerCut, Node: node, At: at, Back: time.Now()}) }()
	s.log("power cut of %s after step %s (pid %d): rebooting", node, step, pid)
	delay := s.RebootDelay
	if delay <= 0 {
		delay = time.Second
	}
	if err := s.Env.Reboot(ctx, node, delay); err != nil {
		return fmt.Errorf("power cut of %s: reboot: %w", node, err)
	}
	s.log("power cut of %s: back", node)
	return nil
}
