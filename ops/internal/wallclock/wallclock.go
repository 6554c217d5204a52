// Package wallclock is the wall clock of slipway's processes: time.Now,
// shifted by an offset that only a test hook can set, so that a chaos run
// can step one process's clock as an NTP step (or a badly set RTC) would.
//
// A process reads the wall clock through Now (or shifts a time.Now reading
// it already has through At) wherever the reading ends in the API (a
// Lease's renewTime, a cordon's or a report's time, an annotation's
// timestamp) or is compared with a timestamp read from the API. Pure local
// intervals (timers, tickers, time.Since of a local time.Now reading) keep
// using package time: a real step does not move the monotonic clock they
// run on.
//
// The hook: when the environment variable SLIPWAY_TEST_CLOCK_STEP_FILE
// (StepFileEnv) names a file, the process reads a Go duration from it
// ("-10m", "+3m", "0s"; empty or missing: no step) at start and every
// PollEvery after, and Now is time.Now plus that offset from then on. A
// file that does not parse leaves the offset as it was and is reported on
// stderr once per content. When the variable is unset no goroutine runs and
// Now costs time.Now plus one atomic load.
//
// How intervals stay honest: Now returns time.Now().Add(offset). Add moves
// the wall reading and the monotonic reading together, so two readings of
// Now under one offset differ by exactly the real time elapsed (Sub and
// Since use the monotonic readings when both have one), as under a real
// step; a time read back from the API has no monotonic reading and is
// compared by its wall clock, which is the shifted one: what a process
// whose clock is off sees. Two things differ from a real step, and are
// stated so that no code relies on them: an interval between a reading
// before the offset changed and one after sees the change (a real step
// would not show in the monotonic clock), and mixing a Now reading with a
// plain time.Now one (time.Since(wallclock.Now())) sees the offset. Hence
// the rule: compare a Now reading only with Now (Since, Until), or with
// times read from the API.
package wallclock

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// StepFileEnv names the file holding the clock step of a test process.
const StepFileEnv = "SLIPWAY_TEST_CLOCK_STEP_FILE"

// PollEvery is how often a process with StepFileEnv set reads its file.
const PollEvery = 50 * time.Millisecond

// offset is the step in nanoseconds; 0 when no hook is set.
var offset atomic.Int64

func init() {
	if path := os.Getenv(StepFileEnv); path != "" {
		f := &follower{path: path, set: func(d time.Duration) { offset.Store(int64(d)) }, warn: warnStderr}
		f.read()
		go f.run(PollEvery)
	}
}

// Now is the process's wall clock: time.Now, stepped by the test hook's
// offset when one is set.
func Now() time.Time { return At(time.Now()) }

// At is t, a time.Now reading, as the process's wall clock shows it: the
// same instant stepped by the hook's offset. For a reading taken once and
// used both locally (with its monotonic clock) and in a write to the API.
func At(t time.Time) time.Time {
	if d := offset.Load(); d != 0 {
		return t.Add(time.Duration(d))
	}
	return t
}

// Since is the time elapsed since t by the process's wall clock; t is a
// Now reading or a time read from the API.
func Since(t time.Time) time.Duration { return Now().Sub(t) }

// Until is the time until t by the process's wall clock; t is a Now
// reading or a time read from the API.
func Until(t time.Time) time.Duration { return t.Sub(Now()) }

// Offset is the step in force (0 without the hook).
func Offset() time.Duration { return time.Duration(offset.Load()) }

// Parse reads a step file's content: a Go duration with an optional sign
// ("-10m", "+3m30s"); empty (or blank) is no step.
func Parse(content []byte) (time.Duration, error) {
	s := strings.TrimSpace(string(content))
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("clock step %q: want a Go duration such as -10m or +3m: %w", s, err)
	}
	return d, nil
}

// follower reads a step file and sets the offset from it.
type follower struct {
	path string
	set  func(time.Duration)
	warn func(string)
	last []byte
}

// read reads the file once: missing is no step, unreadable content keeps
// the offset as it was.
func (f *follower) read() {
	b, err := os.ReadFile(f.path)
	if os.IsNotExist(err) {
		b, err = nil, nil
	}
	if err != nil {
		f.warn(fmt.Sprintf("wallclock: read %s: %v", f.path, err))
		return
	}
	if f.last != nil && bytes.Equal(b, f.last) {
		return
	}
	f.last = append([]byte{}, b...)
	d, err := Parse(b)
	if err != nil {
		f.warn("wallclock: " + f.path + ": " + err.Error() + " (the step in force is kept)")
		return
	}
	f.set(d)
}

func (f *follower) run(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for range t.C {
		f.read()
	}
}

func warnStderr(msg string) { fmt.Fprintln(os.Stderr, msg) }
