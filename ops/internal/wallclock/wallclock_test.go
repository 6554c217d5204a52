package wallclock

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"", 0, false},
		{"  \n", 0, false},
		{"-10m", -10 * time.Minute, false},
		{"+3m\n", 3 * time.Minute, false},
		{"3m30s", 3*time.Minute + 30*time.Second, false},
		{"0s", 0, false},
		{"10", 0, true},
		{"ten minutes", 0, true},
	} {
		got, err := Parse([]byte(c.in))
		if (err != nil) != c.wantErr || got != c.want {
			t.Errorf("Parse(%q) = %v, %v; want %v, error %v", c.in, got, err, c.want, c.wantErr)
		}
	}
}

// withOffset sets the package's offset for one test.
func withOffset(t *testing.T, d time.Duration) {
	t.Helper()
	old := offset.Load()
	offset.Store(int64(d))
	t.Cleanup(func() { offset.Store(old) })
}

func TestNowShiftsTheWallClockOnly(t *testing.T) {
	for _, step := range []time.Duration{0, 10 * time.Minute, -10 * time.Minute, 15 * time.Minute} {
		withOffset(t, step)
		real := time.Now()
		now := Now()
		// The wall clock reads the step ahead (or behind) of the real one.
		wall := now.Round(0).Sub(real.Round(0)) - step
		if wall < 0 || wall > 5*time.Second { // generous: a loaded machine
			t.Errorf("step %v: Now's wall clock is %v off the step", step, wall)
		}
		// Two readings under one step differ by the real time elapsed.
		time.Sleep(20 * time.Millisecond)
		if d := Since(now); d < 20*time.Millisecond || d > 20*time.Millisecond+5*time.Second {
			t.Errorf("step %v: Since a Now reading = %v, want the ~20ms elapsed", step, d)
		}
		// A time from the API (no monotonic reading) at the real now is
		// the step behind by this process's clock.
		api := time.Now().Round(0)
		if d := Since(api) - step; d < 0 || d > 5*time.Second {
			t.Errorf("step %v: Since an API time of now = %v, want about the step", step, Since(api))
		}
		if d := Until(api.Add(step)); d > 0 || d < -5*time.Second {
			t.Errorf("step %v: Until the API time now+step = %v, want about 0", step, d)
		}
		if got := At(real); !got.Equal(real.Add(step)) {
			t.Errorf("step %v: At(t) = %v, want %v", step, got, real.Add(step))
		}
		if Offset() != step {
			t.Errorf("Offset() = %v, want %v", Offset(), step)
		}
	}
}

func TestFollowerReadsTheStepFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "clock-step")
	var got []time.Duration
	var warned []string
	f := &follower{path: path, set: func(d time.Duration) { got = append(got, d) }, warn: func(s string) { warned = append(warned, s) }}
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, step := range []struct {
		do   func()
		want []time.Duration // every offset set so far
		warn int
	}{
		{func() {}, []time.Duration{0}, 0},                                   // no file: no step
		{func() { write("-10m") }, []time.Duration{0, -10 * time.Minute}, 0}, // stepped
		{func() {}, []time.Duration{0, -10 * time.Minute}, 0},                // unchanged: not set again
		{func() { write("soon") }, []time.Duration{0, -10 * time.Minute}, 1}, // bad: kept, said once
		{func() {}, []time.Duration{0, -10 * time.Minute}, 1},                // still bad: not said again
		{func() { write("+3m") }, []time.Duration{0, -10 * time.Minute, 3 * time.Minute}, 1},
		{func() { os.Remove(path) }, []time.Duration{0, -10 * time.Minute, 3 * time.Minute, 0}, 1}, // back
	} {
		step.do()
		f.read()
		if !slices.Equal(got, step.want) || len(warned) != step.warn {
			t.Fatalf("offsets set %v, warnings %q; want %v and %d warnings", got, warned, step.want, step.warn)
		}
	}
}
