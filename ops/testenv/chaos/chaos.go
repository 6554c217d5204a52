// Package chaos runs slipway's systems on the simulated cluster
// (ops/testenv) under faults drawn from a seed (ops/testenv/faults) while
// the invariant monitor (ops/testenv/monitor) watches the API server. A run
// is one system, one seed: the fault schedule follows from the seed and the
// run's shape alone, so the command a failing run prints replays the same
// faults at the same offsets. Named schedules (schedules.go) are fixed
// fault lists for the interleavings a review found.
package chaos

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"slipway.dev/slipway/ops/testenv/faults"
	"slipway.dev/slipway/ops/testenv/monitor"
)

// Systems are the systems a run can drive.
var Systems = []string{"k3os", "update-operator", "eds", "swarm"}

// Options says what one run does.
type Options struct {
	// System is one of Systems.
	System string
	// Seed draws the fault schedule.
	Seed int64
	// Duration is the span the faults start within (default 60s).
	Duration time.Duration
	// Settle bounds the wait, after the faults, for the system to settle
	// (default 3m). Not settling is reported, apart from the violations.
	Settle time.Duration
	// Nodes is the number of fake nodes (default 5: three control-plane).
	Nodes int
	// Bin holds the built slipway and slipway-sim.
	Bin string
	// ToolsDir holds the control-plane binaries ("" : scripts/install-tools).
	ToolsDir string
	// Kinds, when set, are the only kinds of faults drawn.
	Kinds []faults.Kind
	// Schedule, when set, is run instead of the one drawn from Seed (a
	// named schedule, or one read back from a failing run's output).
	Schedule faults.Schedule
	// Name names a named schedule in the report.
	Name string
	// ScheduleFile is the file Schedule was read from (--schedule): the
	// report names it and the replay command runs it again.
	ScheduleFile string
	// Variant picks a system's setup for a named schedule (e.g. an
	// ExtendedDaemonSet whose canary wants no node); "" is the default.
	Variant string
	// Log receives progress and one line per fault.
	Log io.Writer
	// Keep leaves the run's directory (logs, kubeconfigs, the monitor's
	// violations) in place.
	Keep bool
}

func (o Options) withDefaults() Options {
	if o.Duration <= 0 {
		o.Duration = time.Minute
	}
	if o.Settle <= 0 {
		o.Settle = 3 * time.Minute
	}
	if o.Nodes <= 0 {
		o.Nodes = 5
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if _, ok := o.Log.(*lockedWriter); !ok {
		o.Log = &lockedWriter{w: o.Log} // the run's goroutines (faults, variants) log at once
	}
	return o
}

// lockedWriter serializes the writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Result is what one run saw.
type Result struct {
	System string
	Seed   int64
	Name   string
	// ScheduleFile is Options.ScheduleFile.
	ScheduleFile string
	Nodes        int
	Duration     time.Duration
	Kinds        []faults.Kind
	Schedule     faults.Schedule
	Faults       faults.Report
	// Strikes are the armed faults that struck, with when (Excused).
	Strikes []faults.Strike
	// Checks is how many times the monitor checked every invariant.
	Checks     int
	Violations []monitor.Violation
	// Excused are violations that a fault explains: a state invariant
	// (channel-concurrency, control-plane-one-down) naming a node a fault
	// took down then (Excused, excusedReboot), a reboot the fault made, or
	// a cordon that raced a fault's down (raceExcuse). They are reported,
	// each with why (ExcusedWhy), and do not fail the run.
	Excused []monitor.Violation
	// ExcusedWhy says why each of Excused is excused, by excuseKey; one
	// not there was excused because a fault took its node down.
	ExcusedWhy map[string]string
	// MonitorErrors are checks that could not be made.
	MonitorErrors []error
	// Settled: the system reached its end state (e.g. the rollout
	// finished or stopped for its failures) within Settle after the faults.
	Settled bool
	// MonitorProcess is the summary line of the `slipway-sim monitor`
	// process that watched the run beside the in-process monitor: its
	// checks, violations, API requests, CPU and memory.
	MonitorProcess string
	// Outcome says where the system ended (e.g. nodes at the target).
	Outcome string
	// Unsettled says what was still open when it did not settle.
	Unsettled string
	Wall      time.Duration
	// Dir is the run's directory when kept.
	Dir string
}

// Failed reports a violation, or a system that did not settle.
func (r Result) Failed() bool { return len(r.Violations) > 0 || !r.Settled }

// Replay is the command that runs the same schedule again.
func (r Result) Replay() string {
	if r.ScheduleFile != "" {
		return fmt.Sprintf("scripts/chaos --system %s --seeds 1 --seed %d --nodes %d --schedule %s", r.System, r.Seed, r.Nodes, r.ScheduleFile)
	}
	if r.Name != "" {
		return fmt.Sprintf("scripts/chaos --system %s --seeds 1 --named %s", r.System, r.Name)
	}
	cmd := fmt.Sprintf("scripts/chaos --system %s --seeds 1 --seed %d --duration %s --nodes %d", r.System, r.Seed, r.Duration, r.Nodes)
	if len(r.Kinds) > 0 {
		var ks []string
		for _, k := range r.Kinds {
			ks = append(ks, string(k))
		}
		cmd += " --kinds " + strings.Join(ks, ",")
	}
	return cmd
}

// Report writes the run's summary; on a failure, the schedule and the
// violations with their histories.
func (r Result) Report(w io.Writer) {
	what := fmt.Sprintf("seed %d", r.Seed)
	if r.Name != "" {
		what = "schedule " + r.Name
	}
	if r.ScheduleFile != "" {
		what = "schedule file " + r.ScheduleFile
	}
	verdict := "ok"
	if r.Failed() {
		verdict = "FAILED"
	}
	armed := ""
	if len(r.Faults.Armed) > 0 {
		armed = ", armed " + kinds(r.Faults.Armed) // struck ones are among the injected
	}
	fmt.Fprintf(w, "chaos %s %s: %s in %s: faults %s (skipped %s%s, %.1f fault-seconds), %d invariant checks, %d violations (%d excused by a fault), settled %t\n",
		r.System, what, verdict, r.Wall.Round(time.Second), kinds(r.Faults.Injected), kinds(r.Faults.Skipped), armed, r.Faults.FaultTime.Seconds(),
		r.Checks, len(r.Violations), len(r.Excused), r.Settled)
	if r.Outcome != "" {
		fmt.Fprintf(w, "  outcome: %s\n", r.Outcome)
	}
	if r.MonitorProcess != "" {
		fmt.Fprintf(w, "  monitor process: %s\n", strings.TrimPrefix(r.MonitorProcess, "slipway-sim monitor: "))
	}
	for _, err := range r.Faults.Errors {
		fmt.Fprintf(w, "  fault error: %v\n", err)
	}
	for _, err := range r.MonitorErrors {
		fmt.Fprintf(w, "  monitor error: %v\n", err)
	}
	for _, v := range r.Excused { // passing or not: what a fault was let off
		why := r.ExcusedWhy[excuseKey(v)]
		if why == "" {
			why = "a fault took the node down"
		}
		fmt.Fprintf(w, "  excused (%s): %s %s\n", why, v.Invariant, v.Message)
	}
	if !r.Failed() {
		return
	}
	if !r.Settled {
		fmt.Fprintf(w, "  did not settle within the budget: %s\n", r.Unsettled)
	}
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  VIOLATION %s\n", strings.ReplaceAll(v.String(), "\n", "\n  "))
	}
	fmt.Fprintf(w, "  schedule:\n    %s\n", strings.ReplaceAll(strings.TrimSpace(r.Schedule.String()), "\n", "\n    "))
	if r.Dir != "" {
		fmt.Fprintf(w, "  logs: %s\n", r.Dir)
	}
	fmt.Fprintf(w, "  replay: %s\n", r.Replay())
}

// faultGrace is how long after a NotReady fault ends (or a node is
// registered again) the node may still be down by the fault's doing:
// kwok's heartbeat and the node lifecycle controller take that long.
const faultGrace = 15 * time.Second

// Excused reports whether v is a violation a fault of sched (its offsets
// from start) or a power cut that struck (strikes) caused by itself:
//   - a state invariant (channel-concurrency, control-plane-one-down)
//     naming as NotReady a node that a NotReady or Reregister fault held
//     down, or that a power cut had taken down, at v's time (from the
//     fault's offset, or the cut's strike, to its end or the node's
//     return, plus faultGrace). Those invariants count every unavailable
//     node, so a fault can break them by itself; slipway's own part is
//     judged by cordon-within-budget and cordon-control-plane-alone,
//     which a fault's span never excuses (only a down no read could show,
//     raceExcuse). A power cut armed but never struck excuses nothing.
//   - reboot-without-drain and reboot-without-slot of a node whose
//     reboot a power cut made (from the strike to the node's return,
//     plus faultGrace): the fault's reboot, not slipway's, which no drain
//     or slot precedes (a cut while staging ahead, or during a rollback
//     after the slot ended);
//   - reboot-without-slot of a node whose reboot a StallReboot stretched
//     (the controller may give up a slot whose node stays down); its
//     drain is still slipway's to make.
//
// The cordon rules are judged apart, by what the controller could have
// seen when it decided (raceExcuse), never by a time window.
func Excused(v monitor.Violation, sched faults.Schedule, strikes []faults.Strike, start time.Time) bool {
	type window struct {
		node     string
		from, to time.Time
	}
	var downs, cuts, stalls []window
	for _, f := range sched {
		w := window{strings.TrimPrefix(f.Target, "node/"), start.Add(f.At), start.Add(f.At + f.For + faultGrace)}
		switch f.Kind {
		case faults.NotReady, faults.Reregister:
			downs = append(downs, w)
		case faults.StallReboot:
			stalls = append(stalls, w)
		}
	}
	for _, s := range strikes {
		if s.Kind == faults.PowerCut {
			w := window{s.Node, s.At, s.Back.Add(faultGrace)}
			downs, cuts = append(downs, w), append(cuts, w)
		}
	}
	in := func(w window) bool { return !v.At.Before(w.from) && !v.At.After(w.to) }
	switch v.Invariant {
	case monitor.InvChannelConcurrency, monitor.InvControlPlane:
		for _, w := range downs {
			if in(w) && strings.Contains(v.Message, w.node+" (NotReady") {
				return true
			}
		}
	case monitor.InvRebootWithoutDrain, monitor.InvRebootWithoutSlot:
		reboots := cuts
		if v.Invariant == monitor.InvRebootWithoutSlot {
			reboots = append(slices.Clone(cuts), stalls...)
		}
		for _, w := range reboots {
			if in(w) && strings.HasPrefix(v.Key, w.node+"@") {
				return true
			}
		}
	}
	return false
}

// excuseKey names a violation in Result.ExcusedWhy.
func excuseKey(v monitor.Violation) string {
	return v.Invariant + "\x00" + v.Key + "\x00" + v.Message
}

// kinds formats counts by kind, in AllKinds order.
func kinds(m map[faults.Kind]int) string {
	var parts []string
	for _, k := range faults.AllKinds {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m)) { // kinds outside AllKinds, if any
		if !slices.Contains(faults.AllKinds, k) && m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// Run runs one system under one seed's faults (or opts.Schedule).
func Run(ctx context.Context, opts Options) (Result, error) {
	opts = opts.withDefaults()
	switch opts.System {
	case "k3os":
		if opts.Variant == variantRollback {
			return runSystem(ctx, opts, &k3osRollback{k3os: &k3os{}})
		}
		return runK3os(ctx, opts)
	case "update-operator":
		return runUpdateOperator(ctx, opts)
	case "eds":
		return runEDS(ctx, opts)
	case "swarm":
		return runSwarm(ctx, opts)
	default:
		return Result{}, fmt.Errorf("chaos: unknown system %q (known: %s)", opts.System, strings.Join(Systems, ", "))
	}
}
