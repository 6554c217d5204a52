package vmtest

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"time"
)

// Monitor speaks qemu's human monitor protocol (HMP) on a unix socket
// (`-monitor unix:PATH,server=on,wait=off`): the test resets the machine
// through it, as a power cut would, without touching the qemu process.
type Monitor struct {
	path string
}

// NewMonitor returns a client for the monitor socket at path.
func NewMonitor(path string) *Monitor { return &Monitor{path: path} }

// Do sends one HMP command and returns what qemu printed before its next
// prompt.
func (m *Monitor) Do(cmd string, timeout time.Duration) (string, error) {
	conn, err := net.DialTimeout("unix", m.path, timeout)
	if err != nil {
		return "", fmt.Errorf("qemu monitor %s: %w", m.path, err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", fmt.Errorf("qemu monitor: %w", err)
	}
	r := bufio.NewReader(conn)
	if _, err := readPrompt(r); err != nil {
		return "", fmt.Errorf("qemu monitor greeting: %w", err)
	}
	if _, err := fmt.Fprintf(conn, "%s\r\n", cmd); err != nil {
		return "", fmt.Errorf("qemu monitor %q: %w", cmd, err)
	}
	out, err := readPrompt(r)
	if err != nil {
		return "", fmt.Errorf("qemu monitor %q: %w", cmd, err)
	}
	// HMP echoes the command line first.
	out = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out), cmd))
	return out, nil
}

// readPrompt reads until the "(qemu) " prompt and returns what came before.
func readPrompt(r *bufio.Reader) (string, error) {
	const prompt = "(qemu) "
	var b strings.Builder
	for !strings.HasSuffix(b.String(), prompt) {
		c, err := r.ReadByte()
		if err != nil {
			return b.String(), err
		}
		b.WriteByte(c)
	}
	return strings.TrimSuffix(b.String(), prompt), nil
}
