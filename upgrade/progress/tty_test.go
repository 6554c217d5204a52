package progress

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair; it skips when the system has none.
func openPTY(t *testing.T) (controller, terminal *os.File) {
	t.Helper()
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	controller = os.NewFile(uintptr(fd), "/dev/ptmx")
	t.Cleanup(func() { controller.Close() })
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Skipf("unlock pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Skipf("pseudo-terminal number: %v", err)
	}
	terminal, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("open pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { terminal.Close() })
	return controller, terminal
}

func TestDetectTerminal(t *testing.T) {
	_, tty := openPTY(t)
	if r := New(tty, Options{}); !r.terminal {
		t.Error("a pseudo-terminal was not detected as a terminal")
	}
	off := false
	if r := New(tty, Options{Terminal: &off}); r.terminal {
		t.Error("Terminal: false did not force plain lines on a terminal")
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if r := New(f, Options{}); r.terminal {
		t.Error("a regular file was detected as a terminal")
	}
	if r := New(&bytes.Buffer{}, Options{}); r.terminal {
		t.Error("a bytes.Buffer was detected as a terminal")
	}
}

// The window size of the terminal bounds the bar line.
func TestTerminalWidth(t *testing.T) {
	ctl, tty := openPTY(t)
	if err := unix.IoctlSetWinsize(int(ctl.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: 50, Row: 24}); err != nil {
		t.Skipf("set window size: %v", err)
	}
	r := New(tty, Options{})
	if r.width != 50 {
		t.Fatalf("width = %d, want 50", r.width)
	}
	var buf bytes.Buffer
	r.w = &buf
	rc := r.Wrap(io.NopCloser(strings.NewReader("abc")), strings.Repeat("long-name-", 5), 3)
	io.ReadAll(rc)
	rc.Close()
	for _, line := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\r")[1:] {
		if n := len(strings.TrimSuffix(line, clearToEOL)); n > 49 {
			t.Errorf("line of %d columns on a 50-column terminal: %q", n, line)
		}
	}
}
