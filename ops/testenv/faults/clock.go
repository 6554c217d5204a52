package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ClockFile is a node's clock step file, in its directory: the step, a Go
// duration, that its processes' wall clock (ops/internal/wallclock) adds
// to the real time.
const ClockFile = "clock-step"

// ClockStepEnv is what a process needs in its environment for a ClockStep
// to reach it: a simulated node's processes (run in the node's directory)
// read ClockFile there.
const ClockStepEnv = "SLIPWAY_TEST_CLOCK_STEP_FILE=" + ClockFile

// ClockEnv is the environment entry that has a process read its clock step
// from file (a runner's process: Sim.Clocks names the same file).
func ClockEnv(file string) string { return "SLIPWAY_TEST_CLOCK_STEP_FILE=" + file }

// stepClock writes f's step to its target's clock file; the heal writes 0s
// back. The process reads the file within 50 ms (wallclock.PollEvery).
func (s *Sim) stepClock(f Fault) (func(context.Context) error, error) {
	file, err := s.clockFile(f.Target)
	if err != nil {
		return nil, err
	}
	if err := writeStep(file, f.Arg.String()); err != nil {
		return nil, err
	}
	return func(context.Context) error { return writeStep(file, "0s") }, nil
}

// clockFile is target's clock step file.
func (s *Sim) clockFile(target string) (string, error) {
	if file, ok := s.Clocks[target]; ok {
		return file, nil
	}
	if node, ok := strings.CutPrefix(target, "agent/"); ok && s.Env != nil && s.Env.Supervisor != nil {
		return filepath.Join(s.Env.Supervisor.NodeDir(node), ClockFile), nil
	}
	return "", fmt.Errorf("%s: %q has no clock step file (want agent/<node> or a process the run gave one)", ClockStep, target)
}

// writeStep replaces file's content whole (a rename), so that a reader
// never sees half a step.
func writeStep(file, step string) error {
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(step+"\n"), 0o644); err != nil {
		return fmt.Errorf("clock step: %w", err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return fmt.Errorf("clock step: %w", err)
	}
	return nil
}
