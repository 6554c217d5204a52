package chaos

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"slipway.dev/slipway/ops/testenv/monitor"
)

// proc is a process of a run started by the runner (a controller, a
// worker): Kill ends it with SIGKILL and starts it again at once, as a
// Deployment's kubelet would; Signal sends one signal to its group.
type proc struct {
	name string
	argv []string
	log  string
	// env is added to the runner's environment (a clock step file).
	env []string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	stopped bool
	starts  int
}

func newProc(name, log string, argv ...string) *proc {
	return &proc{name: name, argv: argv, log: log}
}

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return fmt.Errorf("%s: stopped", p.name)
	}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s: open its log: %w", p.name, err)
	}
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	if len(p.env) > 0 {
		cmd.Env = append(os.Environ(), p.env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(exited) }()
	p.cmd, p.exited = cmd, exited
	p.starts++
	return nil
}

// Kill sends SIGKILL and starts the process again.
func (p *proc) Kill() (bool, error) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	if cmd == nil || p.stopped {
		p.mu.Unlock()
		return false, nil
	}
	p.cmd = nil
	p.mu.Unlock()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
	return true, p.start()
}

// Signal sends sig to the process's group.
func (p *proc) Signal(sig syscall.Signal) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.stopped {
		return false, nil
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		return false, fmt.Errorf("signal %v to %s: %w", sig, p.name, err)
	}
	return true, nil
}

// stop ends the process (SIGCONT first: a paused one could not hear
// SIGTERM), SIGKILL after grace; it is not started again.
func (p *proc) stop(grace time.Duration) {
	p.mu.Lock()
	p.stopped = true
	cmd, exited := p.cmd, p.exited
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
}

// processTag marks a violation only the monitor process reported.
const processTag = "monitor process: "

// pairWindow is how far apart the run's monitor and the process may see
// one violation: both watch the same API server, the host checks run
// every second.
const pairWindow = 5 * time.Second

// judgeProcess adds to res what the `slipway-sim monitor` process found
// (its violations file, monitor.WriteJSON lines) that the run's own
// monitor and host checks did not report: a process finding pairs with at
// most one of the run's own of the same invariant, with the same key or
// the same message (a cordon's key holds when each monitor saw it), seen
// within pairWindow of it; a recurrence later, or a second finding the
// process made, stands on its own. Each unpaired one is judged with the
// run's excuses (excused: the faults it knows, which the process does
// not), an excused one to res.Excused, any other to res.Violations, so
// that a violation only the process saw fails the run. The process's exit
// status is not read: it fails on excused violations too.
func judgeProcess(res *Result, path string, excused func(monitor.Violation) bool) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // it found nothing (the file is created at its first violation)
	}
	if err != nil {
		return fmt.Errorf("monitor process: %w", err)
	}
	defer f.Close()
	pv, err := monitor.ReadJSON(f)
	own := append(slices.Clone(res.Violations), res.Excused...)
	paired := make([]bool, len(own))
	for _, v := range pv {
		if i := pairOf(v, own, paired); i >= 0 {
			paired[i] = true
			continue
		}
		v.Message = processTag + v.Message
		if excused(v) {
			res.Excused = append(res.Excused, v)
		} else {
			res.Violations = append(res.Violations, v)
		}
	}
	if err != nil {
		return fmt.Errorf("monitor process: %w", err)
	}
	return nil
}

// pairOf is the index of the first of own, not yet paired, that v, a
// process finding, is the same violation as (see judgeProcess), or -1.
func pairOf(v monitor.Violation, own []monitor.Violation, paired []bool) int {
	for i, o := range own {
		d := v.At.Sub(o.At)
		if !paired[i] && o.Invariant == v.Invariant && (o.Key == v.Key || o.Message == v.Message) && d <= pairWindow && d >= -pairWindow {
			return i
		}
	}
	return -1
}
