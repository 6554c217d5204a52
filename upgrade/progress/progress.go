// Package progress reports download progress: a redrawn one-line bar when
// the output is a terminal, and a plain line every Interval (plus one at the
// end) when it is not, so logs stay readable.
package progress

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"golang.org/x/term"
)

// DefaultInterval is the time between plain progress lines.
const DefaultInterval = 5 * time.Second

// redrawInterval bounds how often the terminal bar is redrawn.
const redrawInterval = 200 * time.Millisecond

// Options configure a Reporter.
type Options struct {
	// Interval between plain lines when the output is not a terminal; 0 means DefaultInterval.
	Interval time.Duration
	// Terminal forces the bar (true) or plain lines (false); nil detects
	// whether the writer is a terminal.
	Terminal *bool
}

// Reporter writes the progress of the downloads it wraps to one writer.
type Reporter struct {
	w        io.Writer
	interval time.Duration
	terminal bool
	width    int // terminal columns; lines are cut to fit
	now      func() time.Time
	mu       sync.Mutex // serialises writes to w
}

// New returns a Reporter writing to w.
func New(w io.Writer, opts Options) *Reporter {
	r := &Reporter{w: w, interval: opts.Interval, width: 80, now: time.Now}
	if r.interval <= 0 {
		r.interval = DefaultInterval
	}
	fd, isFile := fileDescriptor(w)
	if opts.Terminal != nil {
		r.terminal = *opts.Terminal
	} else {
		r.terminal = isFile && term.IsTerminal(fd)
	}
	if isFile && r.terminal {
		if cols, _, err := term.GetSize(fd); err == nil && cols > 20 {
			r.width = cols
		}
	}
	return r
}

func fileDescriptor(w io.Writer) (int, bool) {
	f, ok := w.(interface{ Fd() uintptr })
	if !ok {
		return 0, false
	}
	return int(f.Fd()), true
}

// Wrap returns rc reporting the progress of reading it under name; total is
// its size in bytes, or -1 when unknown. A nil Reporter returns rc unchanged.
func (r *Reporter) Wrap(rc io.ReadCloser, name string, total int64) io.ReadCloser {
	if r == nil || r.w == nil {
		return rc
	}
	return &reader{r: r, rc: rc, name: name, total: total}
}

func (r *Reporter) write(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	io.WriteString(r.w, s) //nolint:errcheck // progress output is best effort
}

// reader counts the bytes read through it and reports them.
type reader struct {
	r     *Reporter
	rc    io.ReadCloser
	name  string
	total int64

	mu       sync.Mutex
	done     int64
	start    time.Time // the first Read: a stream opened early and read later is timed from then
	last     time.Time // last report
	finished bool
}

func (d *reader) Read(p []byte) (int, error) {
	d.mu.Lock()
	d.started()
	d.mu.Unlock()
	n, err := d.rc.Read(p)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.done += int64(n)
	switch {
	case d.finished:
	case err == io.EOF:
		d.finish(outcomeDone, nil)
	case err != nil:
		d.finish(outcomeFailed, err)
	default:
		d.tick()
	}
	return n, err
}

// started starts the clock at the first call; d.mu is held.
func (d *reader) started() {
	if d.start.IsZero() {
		d.start = d.r.now()
		d.last = d.start
	}
}

// Close reports the end of a download that was not read to EOF.
func (d *reader) Close() error {
	err := d.rc.Close()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.started()
	if !d.finished {
		if d.total >= 0 && d.done >= d.total {
			d.finish(outcomeDone, nil)
		} else {
			d.finish(outcomeStopped, nil)
		}
	}
	return err
}

// tick reports when the period since the last report has passed.
func (d *reader) tick() {
	period := d.r.interval
	if d.r.terminal {
		period = redrawInterval
	}
	t := d.r.now()
	if t.Sub(d.last) < period {
		return
	}
	d.last = t
	s := d.snapshot(t)
	if d.r.terminal {
		d.r.write(barLine(s, d.r.width))
	} else {
		d.r.write(plainLine(s, outcomeRunning, nil) + "\n")
	}
}

func (d *reader) finish(o outcome, err error) {
	d.finished = true
	s := d.snapshot(d.r.now())
	if d.r.terminal {
		d.r.write(barLine(s, d.r.width) + "\n")
		if o == outcomeDone {
			return
		}
	}
	d.r.write(plainLine(s, o, err) + "\n")
}

func (d *reader) snapshot(t time.Time) snapshot {
	return snapshot{name: d.name, done: d.done, total: d.total, elapsed: t.Sub(d.start)}
}

// outcome is how a download ended, if it has.
type outcome int

const (
	outcomeRunning outcome = iota
	outcomeDone
	outcomeFailed
	outcomeStopped
)

// snapshot is the state of one download at one time.
type snapshot struct {
	name        string
	done, total int64
	elapsed     time.Duration
}

// rate is bytes per second, or -1 when no time has passed.
func (s snapshot) rate() float64 {
	if s.elapsed <= 0 {
		return -1
	}
	return float64(s.done) / s.elapsed.Seconds()
}

// amount reads "3.0 MiB of 10.0 MiB (30%)", or "3.0 MiB" when the total is unknown.
func (s snapshot) amount() string {
	if s.total < 0 {
		return humanBytes(s.done)
	}
	return fmt.Sprintf("%s of %s (%d%%)", humanBytes(s.done), humanBytes(s.total), percent(s.done, s.total))
}

func (s snapshot) rateText() string {
	if r := s.rate(); r >= 0 {
		return humanBytes(int64(r)) + "/s"
	}
	return "-"
}

// plainLine is one log-friendly line.
func plainLine(s snapshot, o outcome, err error) string {
	switch o {
	case outcomeDone:
		return fmt.Sprintf("%s: %s in %s, %s", s.name, s.amount(), s.elapsed.Round(100*time.Millisecond), s.rateText())
	case outcomeFailed:
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Sprintf("%s: failed after %s: %v", s.name, s.amount(), err)
	case outcomeStopped:
		return fmt.Sprintf("%s: stopped after %s", s.name, s.amount())
	default:
		return fmt.Sprintf("%s: %s, %s", s.name, s.amount(), s.rateText())
	}
}
