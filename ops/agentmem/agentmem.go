// Package agentmem keeps the long-running agents (`slipway ops agent` and
// `slipway update-operator agent`, one process on every node) small in
// memory. cmd/slipway calls Start for those two commands only.
//
// Most of an agent's resident memory is not its own: it is the pages of the
// multi-call binary it touched (text, read-only data, and the pclntab the
// runtime reads for stack maps). Starting up touches far more of them than
// an agent uses afterwards (every linked package's init, the command line,
// the first list of every informer), the kernel's fault-around maps 64 KiB
// of page cache around every page touched, and its read-around reads up to
// the device's read-ahead size around every page fault that misses the page
// cache. Those pages stay mapped and cached until memory runs short, and
// are charged to the agent's cgroup. Start waits until the agent has
// settled, unmaps the binary's read-only pages, and from then on drops the
// binary's pages no process maps from the page cache, so that only what the
// agent uses stays. An agent that tells when it is busy with a rollout
// (SetBusy) is unmapped again soon after the rollout's work ends, and one
// that tells when it made a burst of garbage (ReleaseHeap) has its heap's
// free pages handed back then (see docs/agent.md, Memory).
package agentmem

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"time"
)

// GCPercent is the Go GC target when GOGC is not set: an agent idles nearly
// always, and a heap grown 50 % over live data instead of 100 % keeps it
// about 1 MiB smaller after a rollout (scripts/bench-rollout) at a CPU cost
// it does not notice.
const GCPercent = 50

// MaxProcs caps the agents' GOMAXPROCS when the environment does not set
// it and Options.MaxProcs is zero. Each P keeps span caches and a GC
// worker, and more Ps mean more threads: an idle agent's anonymous memory
// measured 5.1, 5.5, 6.4 and 6.9 MiB at GOMAXPROCS 1, 2, 8 and 32. Two keep
// the one parallel step an agent may run in process (the update operator's
// slipway platform stages a release: inflate and extract in a pipeline)
// parallel; an agent that runs nothing in parallel asks for 1.
const MaxProcs = 2

// EnvKeepPages, set to 1, turns the unmapping and dropping of the binary's
// pages off (to measure an agent without it).
const EnvKeepPages = "SLIPWAY_KEEP_STARTUP_PAGES"

// Options tune Start; a zero field takes its default from Defaults.
type Options struct {
	// Settle is how long after Start the binary is first unmapped.
	Settle time.Duration
	// Drop is how often the binary's unmapped pages are dropped from the
	// page cache (and, once, soon after each unmapping).
	Drop time.Duration
	// Unmap is how often the binary is unmapped again after the first
	// time, so that pages touched by a rollout only are let go after it.
	Unmap time.Duration
	// Quiet is how long the agent stays idle after its rollout work
	// (SetBusy) before the binary is unmapped again; Gap is the least time
	// between that unmapping and the one before.
	Quiet, Gap time.Duration
	// ReleaseDelay is how long after ReleaseHeap the heap's free pages are
	// handed back; ReleaseGap the least time between two such releases.
	ReleaseDelay, ReleaseGap time.Duration
	// MaxProcs caps GOMAXPROCS when the environment does not set it.
	MaxProcs int
	Log      *slog.Logger
}

// Defaults are the Options Start uses for a zero field.
func Defaults() Options {
	return Options{Settle: 10 * time.Second, Drop: time.Minute, Unmap: 10 * time.Minute,
		Quiet: 20 * time.Second, Gap: time.Minute, ReleaseDelay: time.Second, ReleaseGap: 10 * time.Second, MaxProcs: MaxProcs}
}

// Start sets the agent's GC target and GOMAXPROCS (unless GOGC and
// GOMAXPROCS are set) and, unless EnvKeepPages is 1, starts letting go of
// the binary's pages the agent does not use, in the background until ctx
// ends, and enables ReleaseHeap.
func Start(ctx context.Context, o Options) {
	o = o.withDefaults()
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(GCPercent)
	}
	if n, ok := procs(os.Getenv("GOMAXPROCS"), runtime.GOMAXPROCS(0), o.MaxProcs); ok {
		runtime.GOMAXPROCS(n)
	}
	if os.Getenv(EnvKeepPages) == "1" {
		return
	}
	agentHeap.enable(o)
	go newKeeper(o, agentActivity).run(ctx)
}

func (o Options) withDefaults() Options {
	d := Defaults()
	for _, f := range []struct{ v, d *time.Duration }{{&o.Settle, &d.Settle}, {&o.Drop, &d.Drop}, {&o.Unmap, &d.Unmap},
		{&o.Quiet, &d.Quiet}, {&o.Gap, &d.Gap}, {&o.ReleaseDelay, &d.ReleaseDelay}, {&o.ReleaseGap, &d.ReleaseGap}} {
		if *f.v <= 0 {
			*f.v = *f.d
		}
	}
	if o.MaxProcs <= 0 {
		o.MaxProcs = d.MaxProcs
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return o
}

// procs is the GOMAXPROCS an agent sets (ok) given the GOMAXPROCS
// environment variable and the runtime's current value: max at most, and
// nothing when the environment chose.
func procs(env string, current, max int) (int, bool) {
	if env != "" || current <= max {
		return current, false
	}
	return max, true
}
