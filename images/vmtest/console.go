// Package vmtest boots the test images under qemu and drives the guest
// through its serial console: upgrade, reboot into the new kernel and rootfs,
// fall back from a broken version; a VM that is a Kubernetes node, upgraded
// by the agent; power resets during an upgrade. The tests are behind the
// `vm` build tag (scripts/vm-test) and the `vmnode` build tag
// (scripts/vm-node-test); this file holds the console driver.
package vmtest

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"sync"
)

// Console collects a guest's serial output and waits for patterns in it.
type Console struct {
	in   io.Writer
	mu   sync.Mutex
	buf  []byte
	pos  int // expectations match after this offset
	more chan struct{}
	done chan struct{}
	err  error
	cmds int
}

// NewConsole reads out (the guest's console) until EOF, copying it to log,
// and writes commands to in.
func NewConsole(in io.Writer, out io.Reader, log io.Writer) *Console {
	c := &Console{in: in, more: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		b := make([]byte, 4096)
		for {
			n, err := out.Read(b)
			if n > 0 {
				if log != nil {
					_, _ = log.Write(b[:n])
				}
				c.mu.Lock()
				c.buf = append(c.buf, b[:n]...)
				c.mu.Unlock()
				select {
				case c.more <- struct{}{}:
				default:
				}
			}
			if err != nil {
				c.mu.Lock()
				c.err = err
				c.mu.Unlock()
				return
			}
		}
	}()
	return c
}

// Expect waits until re matches the output after the last match and returns
// the submatches; the next Expect starts after this match.
func (c *Console) Expect(ctx context.Context, re *regexp.Regexp) ([]string, error) {
	for {
		c.mu.Lock()
		loc := re.FindSubmatchIndex(c.buf[c.pos:])
		if loc != nil {
			var subs []string
			for i := 0; i+1 < len(loc); i += 2 {
				if loc[i] < 0 {
					subs = append(subs, "")
					continue
				}
				subs = append(subs, string(c.buf[c.pos+loc[i]:c.pos+loc[i+1]]))
			}
			c.pos += loc[1]
			c.mu.Unlock()
			return subs, nil
		}
		err := c.err
		c.mu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("console closed (%v) before %q", err, re)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %q: %w; last output:\n%s", re, ctx.Err(), c.Tail(1500))
		case <-c.more:
		case <-c.done:
		}
	}
}

// Saw waits until every re matches the output after the last match, in
// any order, and returns the first match of each; it moves nothing (the
// next Expect starts where it would have).
func (c *Console) Saw(ctx context.Context, res ...*regexp.Regexp) ([]string, error) {
	for {
		c.mu.Lock()
		var found []string
		var missing *regexp.Regexp
		for _, re := range res {
			m := re.Find(c.buf[c.pos:])
			if m == nil {
				missing = re
				break
			}
			found = append(found, string(m))
		}
		err := c.err
		c.mu.Unlock()
		if missing == nil {
			return found, nil
		}
		if err != nil {
			return nil, fmt.Errorf("console closed (%v) before %q", err, missing)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %q: %w; last output:\n%s", missing, ctx.Err(), c.Tail(1500))
		case <-c.more:
		case <-c.done:
		}
	}
}

// Run types cmd into the guest shell and waits for its exit status; it
// returns the output between the command and the status line.
func (c *Console) Run(ctx context.Context, cmd string) (string, int, error) {
	c.cmds++
	mark := fmt.Sprintf("VMTEST-%d", c.cmds)
	if _, err := fmt.Fprintf(c.in, "%s; echo %s rc=$?\n", cmd, mark); err != nil {
		return "", 0, fmt.Errorf("type %q: %w", cmd, err)
	}
	// The echoed input holds "rc=$?", the output a number.
	m, err := c.Expect(ctx, regexp.MustCompile(`(?s)\n(.*?)`+mark+` rc=(\d+)`))
	if err != nil {
		return "", 0, err
	}
	rc, _ := strconv.Atoi(m[2])
	return m[1], rc, nil
}

// Send types line into the guest without waiting.
func (c *Console) Send(line string) error {
	_, err := io.WriteString(c.in, line+"\n")
	return err
}

// Tail returns the last n bytes of output.
func (c *Console) Tail(n int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.buf[max(0, len(c.buf)-n):])
}
