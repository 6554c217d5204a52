package progress

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"
)

// fakeClock advances by step on every reading.
type fakeClock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.step)
	return c.t
}

func newReporter(buf *bytes.Buffer, terminal bool, interval, step time.Duration) *Reporter {
	r := New(buf, Options{Interval: interval, Terminal: &terminal})
	r.now = (&fakeClock{t: time.Unix(0, 0), step: step}).now
	return r
}

// consume reads everything one byte at a time, then closes.
func consume(t *testing.T, rc io.ReadCloser) error {
	t.Helper()
	_, err := io.Copy(io.Discard, iotest.OneByteReader(rc))
	if cerr := rc.Close(); cerr != nil {
		t.Fatalf("Close: %v", cerr)
	}
	return err
}

func lines(s string) []string { return strings.Split(strings.TrimSuffix(s, "\n"), "\n") }

func TestPlainLinesEveryInterval(t *testing.T) {
	var buf bytes.Buffer
	// The clock moves 1s per reading, the interval is 5s: one line every 5 bytes.
	r := newReporter(&buf, false, 5*time.Second, time.Second)
	rc := r.Wrap(io.NopCloser(strings.NewReader(strings.Repeat("x", 20))), "rootfs", 20)
	if err := consume(t, rc); err != nil {
		t.Fatal(err)
	}
	got := lines(buf.String())
	if len(got) != 5 {
		t.Fatalf("got %d lines, want 4 periodic and 1 final:\n%s", len(got), buf.String())
	}
	if want := "rootfs: 5 B of 20 B (25%), 1 B/s"; got[0] != want {
		t.Errorf("first line %q, want %q", got[0], want)
	}
	if last := got[len(got)-1]; !strings.HasPrefix(last, "rootfs: 20 B of 20 B (100%) in ") {
		t.Errorf("final line %q", last)
	}
	if strings.ContainsAny(buf.String(), "\r\x1b") {
		t.Errorf("plain output holds terminal control characters: %q", buf.String())
	}
}

func TestPlainOnlyFinalLineWithinInterval(t *testing.T) {
	var buf bytes.Buffer
	r := New(&buf, Options{Interval: time.Hour}) // a bytes.Buffer is not a terminal
	if err := consume(t, r.Wrap(io.NopCloser(strings.NewReader("hello")), "k3s", -1)); err != nil {
		t.Fatal(err)
	}
	got := lines(buf.String())
	if len(got) != 1 || !strings.HasPrefix(got[0], "k3s: 5 B in ") {
		t.Fatalf("want one final line, got %q", buf.String())
	}
}

func TestTerminalBar(t *testing.T) {
	var buf bytes.Buffer
	r := newReporter(&buf, true, 0, time.Second)
	if err := consume(t, r.Wrap(io.NopCloser(strings.NewReader(strings.Repeat("x", 10))), "kernel", 10)); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
		t.Fatalf("the bar must stay on one line and end with a newline: %q", out)
	}
	redraws := strings.Split(strings.TrimSuffix(out, "\n"), "\r")[1:]
	if len(redraws) != 11 { // one per byte, and the final one
		t.Fatalf("got %d redraws, want 11: %q", len(redraws), out)
	}
	final := redraws[len(redraws)-1]
	if !strings.Contains(final, "[==============================] 10 B / 10 B 100%") || !strings.HasSuffix(final, clearToEOL) {
		t.Errorf("final bar %q", final)
	}
	if !strings.Contains(redraws[4], " 5 B / 10 B  50%") {
		t.Errorf("fifth redraw %q", redraws[4])
	}
}

func TestFailedDownload(t *testing.T) {
	for _, terminal := range []bool{false, true} {
		var buf bytes.Buffer
		r := newReporter(&buf, terminal, time.Hour, time.Millisecond)
		cut := io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(fmt.Errorf("cut: %w", io.ErrUnexpectedEOF)))
		err := consume(t, r.Wrap(io.NopCloser(cut), "rootfs", 10))
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("terminal=%v: the read error must pass through, got %v", terminal, err)
		}
		got := lines(buf.String())
		if last := got[len(got)-1]; last != "rootfs: failed after 3 B of 10 B (30%): unexpected EOF" {
			t.Errorf("terminal=%v: last line %q", terminal, last)
		}
	}
}

func TestClosedEarly(t *testing.T) {
	var buf bytes.Buffer
	r := newReporter(&buf, false, time.Hour, time.Second)
	rc := r.Wrap(io.NopCloser(strings.NewReader("abcdef")), "rootfs", 6)
	io.ReadFull(rc, make([]byte, 2))
	rc.Close()
	rc.Close() // a second Close reports nothing more
	if got := buf.String(); got != "rootfs: stopped after 2 B of 6 B (33%)\n" {
		t.Errorf("got %q", got)
	}
	// Read to its size but closed before EOF was seen: complete.
	buf.Reset()
	rc = r.Wrap(io.NopCloser(strings.NewReader("abcdef")), "kernel", 6)
	io.ReadFull(rc, make([]byte, 6))
	rc.Close()
	if got := buf.String(); !strings.HasPrefix(got, "kernel: 6 B of 6 B (100%) in ") {
		t.Errorf("got %q", got)
	}
}

func TestNilReporter(t *testing.T) {
	var r *Reporter
	rc := io.NopCloser(strings.NewReader("x"))
	if r.Wrap(rc, "x", 1) != rc {
		t.Fatal("a nil Reporter must return the reader unchanged")
	}
}

// Close may come from another goroutine than the reader (run with -race).
func TestConcurrentClose(t *testing.T) {
	var buf bytes.Buffer
	r := New(&buf, Options{Interval: time.Nanosecond})
	pr, pw := io.Pipe()
	rc := r.Wrap(pr, "rootfs", -1)
	var wg sync.WaitGroup
	wg.Go(func() { io.Copy(io.Discard, rc) })
	pw.Write([]byte("some bytes"))
	rc.Close()
	pw.Close()
	wg.Wait()
	if !strings.Contains(buf.String(), "rootfs: ") {
		t.Fatalf("no report: %q", buf.String())
	}
}

// TestClockStartsAtFirstRead: a stream opened early and read after a long
// wait (the kernel while the rootfs extracts) is timed from its first read.
func TestClockStartsAtFirstRead(t *testing.T) {
	var buf bytes.Buffer
	clock := &fakeClock{t: time.Unix(0, 0)}
	r := newReporter(&buf, false, time.Hour, 0)
	r.now = clock.now
	rc := r.Wrap(io.NopCloser(strings.NewReader("kernel")), "kernel", 6)
	clock.t = clock.t.Add(10 * time.Minute) // opened, then left waiting
	if err := consume(t, rc); err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); !strings.Contains(got, "in 0s") {
		t.Fatalf("the wait before the first read was counted: %q", got)
	}
}
