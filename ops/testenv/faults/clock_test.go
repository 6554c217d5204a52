package faults

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"slipway.dev/slipway/ops/internal/wallclock"
)

// TestClockStepDraws: every drawn step is 30s to 15m, ahead or behind,
// and a schedule with steps reads back as it was written.
func TestClockStepDraws(t *testing.T) {
	sp := Spec{Duration: 10 * time.Minute, Targets: map[Kind][]string{ClockStep: {"agent/node-1", "agent/node-2", "controller/a"}}}
	s := Generate(7, sp)
	ahead, behind := 0, 0
	for _, f := range s {
		if f.Kind != ClockStep {
			t.Fatalf("drew %s", f)
		}
		if d := f.Arg.Abs(); d < 30*time.Second || d > 15*time.Minute {
			t.Errorf("%s: step %v not within 30s..15m either way", f, f.Arg)
		}
		if f.Arg > 0 {
			ahead++
		} else {
			behind++
		}
	}
	if ahead == 0 || behind == 0 {
		t.Errorf("%d steps ahead, %d behind: want both\n%s", ahead, behind, s)
	}
	got, err := Parse(s.String())
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != s.String() {
		t.Fatalf("round trip changed the schedule:\n%s\n---\n%s", s, got)
	}
	one, err := Parse("+2s clock-step agent/node-1 for 30s arg -10m\n")
	if err != nil || len(one) != 1 || one[0].Arg != -10*time.Minute || one[0].For != 30*time.Second {
		t.Fatalf("Parse: %v, %v", one, err)
	}
}

// TestClockStepWritesTheStepFile: the step is written where the target's
// process reads it (wallclock's format), and the heal sets it back to 0.
func TestClockStepWritesTheStepFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "clock-controller-a")
	s := &Sim{Clocks: map[string]string{"controller/a": file}}
	read := func() time.Duration {
		t.Helper()
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		d, err := wallclock.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	heal, err := s.Inject(context.Background(), Fault{Kind: ClockStep, Target: "controller/a", For: time.Second, Arg: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if d := read(); d != 10*time.Minute {
		t.Fatalf("step file holds %v, want 10m", d)
	}
	if err := heal(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := read(); d != 0 {
		t.Fatalf("healed step file holds %v, want 0", d)
	}
	if _, err := s.Inject(context.Background(), Fault{Kind: ClockStep, Target: "controller/b", For: time.Second, Arg: time.Minute}); err == nil {
		t.Fatal("a step of a process with no clock file: no error")
	}
}
