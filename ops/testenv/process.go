package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// process is one long-running child of the harness, with its output in a log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	logFile *os.File
	done    chan struct{}
	mu      sync.Mutex
	err     error // exit error once done is closed
}

// startProcess runs bin with args, its stdout and stderr appended to dir/<name>.log.
// The child gets its own process group so that Stop reaches anything it spawned.
func startProcess(name, dir, bin string, args []string, env []string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, logFile: f, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the child's process id.
func (p *process) Pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended, with its exit error.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.err == nil {
			return true, errors.New("exited with status 0")
		}
		return true, p.err
	default:
		return false, nil
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *process) stop(grace time.Duration) {
	if ok, _ := p.exited(); ok {
		return
	}
	_ = syscall.Kill(-p.Pid(), syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
		<-p.done
	}
	// Whatever the leader left behind in its group goes too.
	_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
}

// tail returns the last n lines of the process's log.
func (p *process) tail(n int) string { return tailFile(p.logPath, n) }

// tailFile returns the last n lines of a file ("" when unreadable).
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(lastLines(b, n))
}

// lastLines returns the last n lines of b.
func lastLines(b []byte, n int) []byte {
	b = bytes.TrimRight(b, "\n")
	i := len(b)
	for ; n > 0 && i > 0; n-- {
		i = bytes.LastIndexByte(b[:i], '\n')
		if i < 0 {
			return append(b, '\n')
		}
	}
	if i > 0 {
		i++
	}
	return append(b[i:], '\n')
}

// writeTail prints the last lines of each process's log to w.
func writeTail(w io.Writer, procs []*process, n int) {
	for _, p := range procs {
		fmt.Fprintf(w, "----- last %d lines of %s (%s) -----\n%s", n, p.name, p.logPath, p.tail(n))
	}
}

// waitFor polls check every interval until it returns true, ctx ends, or one of
// the watched processes exits (which is reported with its log's tail).
func waitFor(ctx context.Context, what string, interval time.Duration, procs []*process, check func(context.Context) (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	var last error
	for {
		ok, err := check(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		for _, p := range procs {
			if dead, perr := p.exited(); dead {
				return fmt.Errorf("%s: %s %w; its log %s ends with:\n%s", what, p.name, perr, p.logPath, p.tail(30))
			}
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), last)
			}
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
}
