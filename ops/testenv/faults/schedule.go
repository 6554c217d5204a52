// Package faults is the fault injector of the chaos runs: a schedule of
// faults drawn from a seed (Generate), the same seed and Spec always giving
// the same faults at the same offsets; Run applies a schedule through an
// Injector and heals each timed fault when its time is up; Proxy is the
// fault-injecting TCP proxy that stands between one process and the API
// server (latency, half-open and dropped connections, partitions); Sim is
// the Injector of the simulated cluster (ops/testenv): signals to the
// nodes' agents and to the other processes (leaders included), nodes
// NotReady or deleted and registered again, PodDisruptionBudgets that
// forbid every eviction for a while, and on the simulated hosts a power
// cut right after a step of the host upgrade, a full disk while staging
// (hostfaults.go), a release source that is slow, fails or serves
// corrupt artifacts (Source), and one process's wall clock stepped ahead
// or behind for a while (clock.go), a node that reboots by itself,
// at a time or right after a step of its host upgrade (reboot.go), and
// one writer's writes to some resources held by the API server for a
// while (writehold.go: an admission webhook the harness serves).
//
// A schedule is plain text, one fault a line ("+12.5s pause agent/node-3
// for 4s"), so a failing run prints it and a replay can read it back
// (Parse) as well as regenerate it from the seed.
package faults

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Kind is a kind of fault.
type Kind string

// The kinds of faults. Targets name what a fault hits: a process
// ("agent/node-3", "controller/a"), a node ("node/node-3"), a proxy (the
// process it serves), or a PodDisruptionBudget ("pdb/default/guarded").
const (
	// Kill sends SIGKILL to a process; its supervisor starts it again, as
	// the kubelet restarts a crashed container.
	Kill Kind = "kill"
	// Pause sends SIGSTOP to a process and SIGCONT after For: a process
	// that neither runs nor dies (a long GC pause, a frozen VM).
	Pause Kind = "pause"
	// Latency delays every chunk between a process and the API server by
	// Arg, for For.
	Latency Kind = "latency"
	// HalfOpen holds every byte between a process and the API server for
	// For, connections staying open: a peer that stopped answering.
	HalfOpen Kind = "half-open"
	// Partition cuts a process's connections to the API server and refuses
	// new ones, for For.
	Partition Kind = "partition"
	// Drop closes a process's connections to the API server once.
	Drop Kind = "drop"
	// NotReady reports a node NotReady (its heartbeat stopped) for For.
	NotReady Kind = "not-ready"
	// Reregister deletes a Node and registers it again (kubectl delete
	// node; its kubelet comes back).
	Reregister Kind = "reregister"
	// BlockEviction makes a PodDisruptionBudget forbid every eviction for For.
	BlockEviction Kind = "block-eviction"
	// StallReboot makes a node's reboots stall for For: one under way or
	// begun meanwhile stays down until then (a long For: never back).
	StallReboot Kind = "stall-reboot"
	// PowerCut cuts a node's power right after Step of its next host
	// upgrade or rollback (a step of `slipway ops upgrade --test-crash-at`:
	// staged, renamed:<c>, previous:<c>, current:<c>,
	// rollback:<link>:<c>), armed for For: every process of the node is
	// killed at once and it boots what is on disk.
	PowerCut Kind = "power-cut"
	// FullDisk fills a node's disk for For: its host upgrades fail at Step
	// of staging (default "staged") with ENOSPC.
	FullDisk Kind = "full-disk"
	// SlowSource delays every answer of the release source by Arg, for For.
	SlowSource Kind = "slow-source"
	// FailSource makes the release source answer 503, for For.
	FailSource Kind = "fail-source"
	// CorruptSource makes the release source serve artifacts with a byte
	// changed (their checksum list intact), for For.
	CorruptSource Kind = "corrupt-source"
	// ClockStep steps one process's wall clock by Arg (ahead when
	// positive, behind when negative) for For, then back: what an NTP step
	// or a badly set clock does to the times it writes to the API and
	// compares with the API's. The monotonic clock is not moved (see
	// ops/internal/wallclock).
	ClockStep Kind = "clock-step"
	// Reboot reboots a node by itself (a panic, a power cycle: not asked
	// by slipway), down For; with a Step, armed for For to strike right
	// after that step of the host upgrade, which completes first
	// (reboot.go).
	Reboot Kind = "reboot"
	// SlowWrites makes the API server hold one writer's writes to some
	// resources for Arg each (at most MaxHold), for For: a validating
	// admission webhook the harness serves answers them late
	// (writehold.go). Its target ("writes/<name>") names a WriteHold, its
	// writer and resources: e.g. the k3os controller's writes of the
	// nodes' views, which land after its status writes.
	SlowWrites Kind = "slow-writes"
)

// Timed reports whether a fault of kind k lasts For and is then healed.
func (k Kind) Timed() bool { return k != Kill && k != Drop && k != Reregister }

// Fault is one fault of a schedule.
type Fault struct {
	// At is the offset from the start of the run.
	At     time.Duration
	Kind   Kind
	Target string
	// For is how long a timed fault lasts (0 for the others).
	For time.Duration
	// Arg is the kind's parameter (Latency, SlowSource: the delay).
	Arg time.Duration
	// Step is the host upgrade's step (PowerCut, FullDisk, an armed Reboot).
	Step string
}

func (f Fault) String() string {
	s := fmt.Sprintf("+%s %s %s", f.At, f.Kind, f.Target)
	if f.Kind.Timed() {
		s += " for " + f.For.String()
	}
	if f.Arg != 0 {
		s += " arg " + f.Arg.String()
	}
	if f.Step != "" {
		s += " step " + f.Step
	}
	return s
}

// Schedule is a run's faults, by offset.
type Schedule []Fault

// String is the schedule as Parse reads it, one fault a line.
func (s Schedule) String() string {
	var b strings.Builder
	for _, f := range s {
		b.WriteString(f.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Counts are the faults of each kind.
func (s Schedule) Counts() map[Kind]int {
	m := map[Kind]int{}
	for _, f := range s {
		m[f.Kind]++
	}
	return m
}

// Parse reads a schedule written by Schedule.String (blank lines and lines
// starting with # are skipped).
func Parse(text string) (Schedule, error) {
	var out Schedule
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f, err := parseFault(line)
		if err != nil {
			return nil, fmt.Errorf("schedule line %d %q: %w", n, line, err)
		}
		out = append(out, f)
	}
	if !slices.IsSortedFunc(out, func(a, b Fault) int { return int(a.At - b.At) }) {
		return nil, fmt.Errorf("schedule: faults are not in the order of their offsets")
	}
	return out, nil
}

func parseFault(line string) (Fault, error) {
	w := strings.Fields(line)
	if len(w) < 3 || !strings.HasPrefix(w[0], "+") {
		return Fault{}, fmt.Errorf("want \"+<offset> <kind> <target> [for <duration>] [arg <duration>] [step <step>]\"")
	}
	at, err := time.ParseDuration(w[0][1:])
	if err != nil {
		return Fault{}, fmt.Errorf("offset: %w", err)
	}
	f := Fault{At: at, Kind: Kind(w[1]), Target: w[2]}
	if !slices.Contains(AllKinds, f.Kind) {
		return Fault{}, fmt.Errorf("unknown kind %q (known: %v)", f.Kind, AllKinds)
	}
	for rest := w[3:]; len(rest) > 0; rest = rest[2:] {
		if len(rest) < 2 {
			return Fault{}, fmt.Errorf("%q wants a value", rest[0])
		}
		if rest[0] == "step" {
			f.Step = rest[1]
			continue
		}
		d, err := time.ParseDuration(rest[1])
		if err != nil {
			return Fault{}, fmt.Errorf("%s: %w", rest[0], err)
		}
		switch rest[0] {
		case "for":
			f.For = d
		case "arg":
			f.Arg = d
		default:
			return Fault{}, fmt.Errorf("unknown word %q (want for, arg or step)", rest[0])
		}
	}
	if f.Kind.Timed() && f.For <= 0 {
		return Fault{}, fmt.Errorf("a %s fault wants \"for <duration>\"", f.Kind)
	}
	if f.Kind == ClockStep && f.Arg == 0 {
		return Fault{}, fmt.Errorf("a %s fault wants \"arg <step>\" (e.g. arg -10m: the clock 10 minutes behind)", f.Kind)
	}
	if f.Kind == SlowWrites && (f.Arg <= 0 || f.Arg > MaxHold) {
		return Fault{}, fmt.Errorf("a %s fault wants \"arg <hold>\", each write's hold, more than 0 and at most %s (e.g. arg 10s)", f.Kind, MaxHold)
	}
	if f.Kind == PowerCut && f.Step == "" {
		return Fault{}, fmt.Errorf("a %s fault wants \"step <step>\" (e.g. step current:kernel)", f.Kind)
	}
	return f, nil
}

// AllKinds are the kinds Generate draws from, in a fixed order.
var AllKinds = []Kind{Kill, Pause, Latency, HalfOpen, Partition, Drop, NotReady, Reregister, BlockEviction, StallReboot,
	PowerCut, FullDisk, SlowSource, FailSource, CorruptSource, ClockStep, Reboot, SlowWrites}

// Spec says what Generate may draw.
type Spec struct {
	// Duration is the span of the run the faults start within.
	Duration time.Duration
	// Gap is the mean time between two faults (default 2s).
	Gap time.Duration
	// Targets are the targets of each kind; a kind with none is not drawn.
	Targets map[Kind][]string
	// Weights weigh the kinds (default 1 each; 0 in a set map: never).
	Weights map[Kind]int
	// MaxFor bounds a timed fault's length (default 8s; at least 500ms is drawn).
	MaxFor time.Duration
	// MaxLatency bounds a Latency fault's delay (default 2s).
	MaxLatency time.Duration
	// Steps are the host upgrade's steps a PowerCut is drawn at.
	Steps []string
	// MaxStep bounds a ClockStep's step either way (default 15m; at least
	// 30s is drawn).
	MaxStep time.Duration
}

func (s Spec) withDefaults() Spec {
	if s.Gap <= 0 {
		s.Gap = 2 * time.Second
	}
	if s.MaxFor <= 0 {
		s.MaxFor = 8 * time.Second
	}
	if s.MaxLatency <= 0 {
		s.MaxLatency = 2 * time.Second
	}
	if s.MaxStep <= 0 {
		s.MaxStep = 15 * time.Minute
	}
	return s
}

// Generate draws a schedule from seed: the same seed and Spec give the same
// faults at the same offsets. Two faults never hit one target at once: a
// target is drawn again only once its last fault is healed.
func Generate(seed int64, spec Spec) Schedule {
	spec = spec.withDefaults()
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	var kinds []Kind
	var weights []int
	total := 0
	for _, k := range AllKinds {
		w := 1
		if spec.Weights != nil {
			w = spec.Weights[k]
		}
		if w > 0 && len(spec.Targets[k]) > 0 && (k != PowerCut || len(spec.Steps) > 0) {
			kinds, weights = append(kinds, k), append(weights, w)
			total += w
		}
	}
	if total == 0 {
		return nil
	}
	busy := map[string]time.Duration{} // target (kind-independent) to the end of its fault
	var out Schedule
	minFor := 500 * time.Millisecond
	for at := time.Duration(0); ; {
		// Exponential gaps: a Poisson process of faults.
		at += time.Duration(rng.ExpFloat64() * float64(spec.Gap)).Round(time.Millisecond)
		if at >= spec.Duration {
			return out
		}
		r := rng.IntN(total)
		i := 0
		for r >= weights[i] {
			r -= weights[i]
			i++
		}
		k := kinds[i]
		targets := spec.Targets[k]
		target := targets[rng.IntN(len(targets))]
		f := Fault{At: at, Kind: k, Target: target}
		if k.Timed() {
			f.For = (minFor + time.Duration(rng.Int64N(int64(max(spec.MaxFor-minFor, 1))))).Round(10 * time.Millisecond)
		}
		if k == Latency || k == SlowSource {
			f.Arg = (10*time.Millisecond + time.Duration(rng.Int64N(int64(spec.MaxLatency)))).Round(time.Millisecond)
		}
		if k == PowerCut { // drawn only for this kind: the other kinds' draws stay as they were
			f.Step = spec.Steps[rng.IntN(len(spec.Steps))]
		}
		if k == ClockStep { // likewise
			f.Arg = drawStep(rng, spec.MaxStep)
		}
		if k == SlowWrites { // likewise: each write held up to the fault's length
			f.Arg = min(100*time.Millisecond+time.Duration(rng.Int64N(int64(f.For))), MaxHold).Round(time.Millisecond)
		}
		// Draws happen whether or not the fault is kept, so that one
		// skipped fault does not shift every later one.
		if busy[target] > at {
			continue
		}
		busy[target] = at + f.For + 100*time.Millisecond
		out = append(out, f)
	}
}

// drawStep draws a clock step of 30s to max, ahead or behind, to the second.
func drawStep(rng *rand.Rand, limit time.Duration) time.Duration {
	least := 30 * time.Second
	d := (least + time.Duration(rng.Int64N(int64(max(limit-least, time.Second))))).Round(time.Second)
	if rng.IntN(2) == 0 {
		return -d
	}
	return d
}
