package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"slipway.dev/slipway/ops/testenv"
)

// Proc is a process of a chaos run other than the nodes' agents (a
// controller, a worker), as its runner keeps it: Kill ends it with SIGKILL
// and starts it again; Signal sends one signal. Both report false, doing
// nothing, when the process is not running now.
type Proc interface {
	Kill() (bool, error)
	Signal(sig syscall.Signal) (bool, error)
}

// Sim applies faults to a simulated cluster. Targets:
//   - "agent/<node>": the node's command run by the supervisor (Kill, Pause);
//   - any key of Procs (Kill, Pause);
//   - any key of Proxies, the process a proxy serves (Latency, HalfOpen,
//     Partition, Drop);
//   - "node/<node>": a Node (NotReady, Reregister, StallReboot);
//   - "pdb/<namespace>/<name>": a PodDisruptionBudget (BlockEviction);
//   - "node/<node>" whose processes run with SLIPWAY_TEST_CRASH_AT=@FaultFile
//     (PowerCut, FullDisk: see hostfaults.go);
//   - any key of Sources (SlowSource, FailSource, CorruptSource);
//   - "agent/<node>" or any key of Clocks (ClockStep: clock.go);
//   - "node/<node>" (Reboot: reboot.go; with a Step, its processes run
//     with SLIPWAY_TEST_CRASH_AT=@FaultFile);
//   - any key of Writes ("writes/<name>": SlowWrites, writehold.go).
type Sim struct {
	Env     *testenv.Env
	Client  kubernetes.Interface
	Procs   map[string]Proc
	Proxies map[string]*Proxy
	Sources map[string]*Source
	// Writes are the write holds a SlowWrites fault may hit, by target
	// ("writes/<name>"): each one writer's writes to some resources.
	Writes map[string]*WriteHold
	// Clocks are the clock step files (wallclock's
	// SLIPWAY_TEST_CLOCK_STEP_FILE) of the processes a ClockStep may hit,
	// by target; an "agent/<node>" target not there has ClockFile in its
	// node's directory (the node's processes run there with
	// ClockStepEnv).
	Clocks map[string]string
	// Log, when set, receives what the host faults did (a power cut fired).
	Log func(string)
	// RebootDelay is a power cut's downtime (default 1s).
	RebootDelay time.Duration
	// SlotHolders, when set, names the nodes holding a slot now: a Reboot
	// records whether its node held one (Strike.Slot).
	SlotHolders func(context.Context) ([]string, error)

	mu      sync.Mutex
	fired   map[Kind]int
	strikes []Strike
}

var _ Injector = (*Sim)(nil)

// Inject applies f.
func (s *Sim) Inject(ctx context.Context, f Fault) (func(context.Context) error, error) {
	switch f.Kind {
	case Kill:
		return nil, s.kill(f.Target)
	case Pause:
		if err := s.signal(f.Target, syscall.SIGSTOP); err != nil {
			return nil, err
		}
		return func(context.Context) error { return s.signal(f.Target, syscall.SIGCONT) }, nil
	case Latency, HalfOpen, Partition, Drop:
		p := s.Proxies[f.Target]
		if p == nil {
			return nil, fmt.Errorf("no proxy serves %q", f.Target)
		}
		switch f.Kind {
		case Latency:
			p.SetLatency(f.Arg)
			return func(context.Context) error { p.SetLatency(0); return nil }, nil
		case HalfOpen:
			p.SetHalfOpen(true)
			return func(context.Context) error { p.SetHalfOpen(false); return nil }, nil
		case Partition:
			p.SetPartition(true)
			return func(context.Context) error { p.SetPartition(false); return nil }, nil
		default:
			p.Drop()
			return nil, nil
		}
	case NotReady:
		node, ok := strings.CutPrefix(f.Target, "node/")
		if !ok {
			return nil, fmt.Errorf("%s wants a node/<name> target", f.Kind)
		}
		if err := s.setDown(ctx, node, true); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return s.setDown(ctx, node, false) }, nil
	case Reregister:
		node, ok := strings.CutPrefix(f.Target, "node/")
		if !ok {
			return nil, fmt.Errorf("%s wants a node/<name> target", f.Kind)
		}
		return nil, s.reregister(ctx, node)
	case BlockEviction:
		return s.blockEviction(ctx, f.Target)
	case StallReboot:
		node, ok := strings.CutPrefix(f.Target, "node/")
		if !ok {
			return nil, fmt.Errorf("%s wants a node/<name> target", f.Kind)
		}
		if s.Env.Supervisor == nil {
			return nil, fmt.Errorf("%s: the Env has no supervisor", f.Kind)
		}
		release := s.Env.Supervisor.HoldReboots(node)
		return func(context.Context) error { release(); return nil }, nil
	case PowerCut:
		return s.armPowerCut(ctx, f)
	case FullDisk:
		return s.fillDisk(f)
	case ClockStep:
		return s.stepClock(f)
	case Reboot:
		if f.Step != "" {
			return s.armReboot(ctx, f)
		}
		return s.rebootNow(ctx, f)
	case SlowWrites:
		w := s.Writes[f.Target]
		if w == nil {
			return nil, fmt.Errorf("%s: no write hold %q (a run names its own, writes/<name>)", f.Kind, f.Target)
		}
		heal, err := w.Hold(f.Arg)
		if err != nil {
			return nil, err
		}
		return func(context.Context) error { heal(); return nil }, nil
	case SlowSource, FailSource, CorruptSource:
		src := s.Sources[f.Target]
		if src == nil {
			return nil, fmt.Errorf("no release source %q", f.Target)
		}
		switch f.Kind {
		case SlowSource:
			src.SetDelay(f.Arg)
			return func(context.Context) error { src.SetDelay(0); return nil }, nil
		case FailSource:
			src.SetFail(true)
			return func(context.Context) error { src.SetFail(false); return nil }, nil
		default:
			src.SetCorrupt(true)
			return func(context.Context) error { src.SetCorrupt(false); return nil }, nil
		}
	}
	return nil, fmt.Errorf("unknown fault kind %q", f.Kind)
}

func (s *Sim) kill(target string) error {
	if node, ok := strings.CutPrefix(target, "agent/"); ok {
		done, err := s.Env.Crash(node)
		return skipIf(!done, err)
	}
	p := s.Procs[target]
	if p == nil {
		return fmt.Errorf("no process %q", target)
	}
	done, err := p.Kill()
	return skipIf(!done, err)
}

func (s *Sim) signal(target string, sig syscall.Signal) error {
	if node, ok := strings.CutPrefix(target, "agent/"); ok {
		if s.Env.Supervisor == nil {
			return fmt.Errorf("signal %s: the Env has no supervisor", target)
		}
		done, err := s.Env.Supervisor.Signal(node, sig)
		return skipIf(!done, err)
	}
	p := s.Procs[target]
	if p == nil {
		return fmt.Errorf("no process %q", target)
	}
	done, err := p.Signal(sig)
	return skipIf(!done, err)
}

func skipIf(skip bool, err error) error {
	if err == nil && skip {
		return ErrSkip
	}
	return err
}

// setDown sets or removes the node's testenv.DownAnnotation: kwok reports
// it NotReady and stops its heartbeat, as for a node powered off.
func (s *Sim) setDown(ctx context.Context, node string, down bool) error {
	var val any
	if down {
		val = "true"
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{testenv.DownAnnotation: val}}})
	_, err := s.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return ErrSkip
	}
	if err != nil {
		return fmt.Errorf("mark node %s down=%t: %w", node, down, err)
	}
	return nil
}

// reregister deletes the Node and registers it again with the labels it
// had (its kubelet's --node-labels), as kubectl delete node followed by its
// kubelet's return; its agent keeps running.
func (s *Sim) reregister(ctx context.Context, node string) error {
	old, err := s.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ErrSkip
	}
	if err != nil {
		return fmt.Errorf("get node %s: %w", node, err)
	}
	err = s.Client.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return ErrSkip
	}
	if err != nil {
		return fmt.Errorf("delete node %s: %w", node, err)
	}
	fresh := testenv.FakeNode(node)
	fresh.Status.NodeInfo.BootID = old.Status.NodeInfo.BootID // the same boot: registering again is not a reboot
	for k, v := range old.Labels {
		if _, ok := fresh.Labels[k]; !ok && !strings.Contains(k, "slipway.dev/") { // slipway's own labels are the agents' to write again
			fresh.Labels[k] = v
		}
	}
	for {
		_, err := s.Client.CoreV1().Nodes().Create(ctx, fresh, metav1.CreateOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("register node %s again: %w", node, err)
		}
		select { // still being deleted
		case <-ctx.Done():
			return fmt.Errorf("register node %s again: %w", node, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// blockEviction sets the PDB's maxUnavailable to 0 (no eviction allowed)
// and restores its spec at heal.
func (s *Sim) blockEviction(ctx context.Context, target string) (func(context.Context) error, error) {
	rest, ok := strings.CutPrefix(target, "pdb/")
	ns, name, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 {
		return nil, fmt.Errorf("%s wants a pdb/<namespace>/<name> target, not %q", BlockEviction, target)
	}
	pdbs := s.Client.PolicyV1().PodDisruptionBudgets(ns)
	old, err := pdbs.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, ErrSkip
	}
	if err != nil {
		return nil, fmt.Errorf("get PDB %s/%s: %w", ns, name, err)
	}
	block := []byte(`{"spec":{"minAvailable":null,"maxUnavailable":0}}`)
	if _, err := pdbs.Patch(ctx, name, types.MergePatchType, block, metav1.PatchOptions{}); err != nil {
		return nil, fmt.Errorf("block evictions of PDB %s/%s: %w", ns, name, err)
	}
	restore, _ := json.Marshal(map[string]any{"spec": map[string]any{"minAvailable": old.Spec.MinAvailable, "maxUnavailable": old.Spec.MaxUnavailable}})
	return func(ctx context.Context) error {
		if _, err := pdbs.Patch(ctx, name, types.MergePatchType, restore, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("restore PDB %s/%s: %w", ns, name, err)
		}
		return nil
	}, nil
}
