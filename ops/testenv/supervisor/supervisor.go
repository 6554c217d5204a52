// Package supervisor runs one command per fake node (the node's "agent") with
// NODE_NAME, SLIPWAY_NODE_DIR and SLIPWAY_NODE_BOOT (the node's boot count:
// a command restarted within a boot sees the same) set, and simulates a
// node's reboot: stop its command, report the node NotReady, wait out the
// rest of the reboot's time, empty its /run, report the new boot ID, start
// the command again and report the node Ready.
package supervisor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
)

// DownAnnotation, "true" on a fake node, makes the cluster's kwok stages report
// the node NotReady and stop its heartbeat.
const DownAnnotation = "sim.slipway.dev/down"

// Options configures a Supervisor.
type Options struct {
	Client kubernetes.Interface
	// Nodes are the fake nodes; node n's directory is <NodesRoot>/<n>.
	Nodes     []string
	NodesRoot string
	// Command runs once per node (none when empty: reboots then only change the node's state).
	Command []string
	// Env is added to each command's environment (e.g. KUBECONFIG, PATH).
	Env []string
	// Socket, when set, is the unix socket Serve listens on; it is passed to
	// the commands as SLIPWAY_SIM_SOCKET so they can request their own reboot.
	Socket string
	Log    *slog.Logger
}

// Supervisor owns the per-node commands.
type Supervisor struct {
	opts    Options
	mu      sync.Mutex
	nodes   map[string]*nodeProc
	stopped bool // no command starts after Stop, not even at the end of a reboot
	// holds are nodes whose reboots stall (HoldReboots): a reboot's
	// downtime lasts until the channel is closed.
	holds map[string]chan struct{}
}

// nodeProc is the state of one node.
type nodeProc struct {
	cmd       *exec.Cmd
	exited    chan struct{}
	rebooting bool
	boots     int
}

// New returns a Supervisor; Start starts the commands.
func New(opts Options) (*Supervisor, error) {
	if opts.Client == nil || opts.NodesRoot == "" {
		return nil, fmt.Errorf("supervisor: Client and NodesRoot are required")
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	s := &Supervisor{opts: opts, nodes: map[string]*nodeProc{}}
	for _, n := range opts.Nodes {
		s.nodes[n] = &nodeProc{}
	}
	return s, nil
}

// NodeDir is the directory that stands for node's root file system.
func (s *Supervisor) NodeDir(node string) string { return filepath.Join(s.opts.NodesRoot, node) }

// Start creates every node's directory and starts its command.
func (s *Supervisor) Start() error {
	for _, n := range s.opts.Nodes {
		if err := os.MkdirAll(s.NodeDir(n), 0o755); err != nil {
			return fmt.Errorf("create node directory: %w", err)
		}
		if err := s.startNode(n, true); err != nil {
			return err
		}
	}
	return nil
}

// Pids returns the pid of each node's running command.
func (s *Supervisor) Pids() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[string]int{}
	for n, p := range s.nodes {
		if p.cmd != nil && p.cmd.Process != nil {
			m[n] = p.cmd.Process.Pid
		}
	}
	return m
}

// Boots is how many times node has been (re)booted by the supervisor.
func (s *Supervisor) Boots(node string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.nodes[node]; ok {
		return p.boots
	}
	return 0
}

// Stop stops every node's command; none starts again.
func (s *Supervisor) Stop() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, n := range s.opts.Nodes {
		wg.Add(1)
		go func() { defer wg.Done(); s.stopNode(n, 10*time.Second) }()
	}
	wg.Wait()
}

// startNode starts node's command (when there is one) and, when boot is
// set, counts a boot.
func (s *Supervisor) startNode(node string, boot bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.nodes[node]
	if s.stopped {
		return fmt.Errorf("node %s: the supervisor is stopped", node)
	}
	if boot {
		p.boots++
	}
	if len(s.opts.Command) == 0 {
		return nil
	}
	dir := s.NodeDir(node)
	logf, err := os.OpenFile(filepath.Join(dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open %s's command log: %w", node, err)
	}
	cmd := exec.Command(s.opts.Command[0], s.opts.Command[1:]...)
	cmd.Dir = dir
	cmd.Env = append(append(withoutSlipwayEnv(os.Environ()), s.opts.Env...), "NODE_NAME="+node, "SLIPWAY_NODE_DIR="+dir, fmt.Sprintf("SLIPWAY_NODE_BOOT=%d", p.boots))
	if s.opts.Socket != "" {
		cmd.Env = append(cmd.Env, "SLIPWAY_SIM_SOCKET="+s.opts.Socket)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s's command %v: %w", node, s.opts.Command, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	p.cmd, p.exited = cmd, exited
	s.opts.Log.Info("node command started", "node", node, "pid", cmd.Process.Pid, "boot", p.boots)
	return nil
}

// stopNode stops node's command: SIGTERM to its process group, SIGKILL after grace.
func (s *Supervisor) stopNode(node string, grace time.Duration) {
	s.mu.Lock()
	p := s.nodes[node]
	cmd, exited := p.cmd, p.exited
	p.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
}

// NewBootID returns a random boot ID in the kernel's format
// (/proc/sys/kernel/random/boot_id): a fake node gets one when it is
// created, as a kubelet reports its boot from its first status, and a new
// one at each simulated reboot.
func NewBootID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// Reboot simulates a reboot of node and returns once it is back: its command
// stopped, the node NotReady, the rest of delay waited, /run emptied, the
// new boot ID on the Node, its command started again and the node Ready.
//
// delay is the reboot's time from the request to the host's return, as a
// host's reboot time is: its services' shutdown (the command's exit here)
// and the node's NotReady are part of it, not added to it (downtimeLeft).
// On the way back the supervisor stands for the kubelet: its first status
// after the boot carries the new boot ID, and it starts the node's pods
// (the command) without waiting for its own Ready to be seen.
func (s *Supervisor) Reboot(ctx context.Context, node string, delay time.Duration) error {
	requested := time.Now()
	s.mu.Lock()
	p, ok := s.nodes[node]
	if ok && p.rebooting {
		s.mu.Unlock()
		return fmt.Errorf("node %s is already rebooting", node)
	}
	if ok {
		p.rebooting = true
	}
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("node %s is not supervised", node)
	}
	defer func() { s.mu.Lock(); p.rebooting = false; s.mu.Unlock() }()
	s.opts.Log.Info("rebooting node", "node", node, "delay", delay)
	if err := s.goDown(ctx, node); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(downtimeLeft(delay, time.Since(requested))): // the simulated downtime itself
	}
	if err := s.waitHold(ctx, node); err != nil {
		return err
	}
	return s.comeBack(ctx, node)
}

// downtimeLeft is what remains of a reboot of delay once spent has gone
// by since its request (the shutdown, the node reported NotReady): none
// when the shutdown alone took longer.
func downtimeLeft(delay, spent time.Duration) time.Duration { return max(delay-spent, 0) }

// goDown stops node's command and reports the node NotReady.
func (s *Supervisor) goDown(ctx context.Context, node string) error {
	s.stopNode(node, 10*time.Second)
	if err := setDown(ctx, s.opts.Client, node, true); err != nil {
		return err
	}
	return waitReady(ctx, s.opts.Client, node, false)
}

// waitHold keeps a stalled reboot (HoldReboots) down until it is released.
func (s *Supervisor) waitHold(ctx context.Context, node string) error {
	s.mu.Lock()
	hold := s.holds[node]
	s.mu.Unlock()
	if hold == nil {
		return nil
	}
	s.opts.Log.Info("reboot stalled", "node", node)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-hold:
		return nil
	}
}

// comeBack brings node up in a kubelet's order: /run empty, the new boot
// ID in the node's first status, the node's pods (its command) started
// while the node turns Ready, then its other pods marked Ready again.
func (s *Supervisor) comeBack(ctx context.Context, node string) error {
	if err := os.RemoveAll(filepath.Join(s.NodeDir(node), "run")); err != nil {
		return fmt.Errorf("empty %s's /run: %w", node, err)
	}
	// Only the supervisor writes the boot ID (no kwok stage does:
	// stages.yaml), as only the kubelet writes a real node's.
	if err := setBootID(ctx, s.opts.Client, node, NewBootID()); err != nil {
		return err
	}
	if err := setDown(ctx, s.opts.Client, node, false); err != nil {
		return err
	}
	if err := s.startNode(node, true); err != nil {
		return err
	}
	if err := waitReady(ctx, s.opts.Client, node, true); err != nil {
		return err
	}
	s.opts.Log.Info("node back", "node", node)
	s.podsReadyAfterBoot(node)
	return nil
}

// podsReadyAfterBoot marks node's pods Ready again now, and once more after
// the node lifecycle controller's monitor period (5 s), which may mark them
// NotReady late, having seen the node down.
func (s *Supervisor) podsReadyAfterBoot(node string) {
	ready := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := podsReadyAgain(ctx, s.opts.Client, node); err != nil {
			s.opts.Log.Warn("pods not marked Ready after the reboot", "node", node, "err", err)
		}
	}
	ready()
	time.AfterFunc(7*time.Second, func() {
		s.mu.Lock()
		stopped := s.stopped
		s.mu.Unlock()
		if !stopped {
			ready()
		}
	})
}

// Crash kills node's command with SIGKILL, as a crash or an OOM kill would,
// and starts it again at once, as the kubelet restarts a crashed container:
// the same boot, so no boot is counted and the boot ID stays. It reports
// false, doing nothing, when the node is rebooting or runs no command; a
// reboot requested meanwhile is refused (the restarted command asks again).
func (s *Supervisor) Crash(node string) (bool, error) {
	return s.restart(node, "killed", func(pid int, _ <-chan struct{}) { _ = syscall.Kill(-pid, syscall.SIGKILL) })
}

// Replace ends node's command as the kubelet ends a pod's container when
// its DaemonSet is updated (SIGTERM, then SIGKILL after grace) and starts
// it again: started from the node's PATH, it runs whatever binary is there
// now. Same boot, same boot ID; false, doing nothing, as for Crash.
func (s *Supervisor) Replace(node string, grace time.Duration) (bool, error) {
	return s.restart(node, "replaced", func(pid int, exited <-chan struct{}) {
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(grace):
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	})
}

// restart ends node's command with end (given its pid and a channel
// closed at its exit) and starts it again on the same boot.
func (s *Supervisor) restart(node, how string, end func(pid int, exited <-chan struct{})) (bool, error) {
	s.mu.Lock()
	p, ok := s.nodes[node]
	if !ok || s.stopped || p.rebooting || p.cmd == nil {
		s.mu.Unlock()
		return false, nil
	}
	cmd, exited := p.cmd, p.exited
	p.cmd, p.rebooting = nil, true
	s.mu.Unlock()
	defer func() { s.mu.Lock(); p.rebooting = false; s.mu.Unlock() }()
	end(cmd.Process.Pid, exited)
	<-exited
	s.opts.Log.Info("node command "+how, "node", node, "pid", cmd.Process.Pid)
	return true, s.startNode(node, false)
}

// withoutSlipwayEnv drops the SLIPWAY_* variables of the caller's
// environment: slipway takes every flag from SLIPWAY_<FLAG>, so a variable
// exported on a workstation (SLIPWAY_REBOOT=false, SLIPWAY_SYSTEM_DIR)
// would change what a simulated node's agent does. A node's command gets
// only the SLIPWAY_* variables its Options give it.
func withoutSlipwayEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "SLIPWAY_") {
			out = append(out, kv)
		}
	}
	return out
}

// Signal sends sig to node's command's process group (the agent and what it
// started), e.g. SIGSTOP and later SIGCONT for a process that neither runs
// nor dies. It reports false, doing nothing, when the node is rebooting or
// its command is being restarted or not running.
func (s *Supervisor) Signal(node string, sig syscall.Signal) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.nodes[node]
	if !ok {
		return false, fmt.Errorf("node %s is not supervised", node)
	}
	if s.stopped || p.rebooting || p.cmd == nil {
		return false, nil
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		return false, fmt.Errorf("signal %v to %s's command: %w", sig, node, err)
	}
	return true, nil
}

// HoldReboots makes node's reboots stall: a reboot under way or begun
// while held stays down (NotReady, its command stopped) until the
// returned release is called, as a host that hangs in its firmware or
// never comes back would. Calling release more than once is harmless.
func (s *Supervisor) HoldReboots(node string) (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holds == nil {
		s.holds = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	s.holds[node] = ch
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.holds[node] == ch {
				delete(s.holds, node)
			}
			s.mu.Unlock()
			close(ch)
		})
	}
}
