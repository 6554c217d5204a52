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
// agent uses stays (see docs/agent.md, Memory).
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
// it. Each P keeps span caches and a GC worker, and more Ps mean more
// threads: an idle agent's anonymous memory measured 5.1, 5.5, 6.4 and
// 6.9 MiB at GOMAXPROCS 1, 2, 8 and 32. Two keep the one parallel step an
// agent may run in process (the update operator's slipway platform stages a
// release: inflate and extract in a pipeline) parallel.
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
	Log   *slog.Logger
}

// Defaults are the Options Start uses for a zero field.
func Defaults() Options {
	return Options{Settle: 10 * time.Second, Drop: time.Minute, Unmap: 10 * time.Minute}
}

// Start sets the agent's GC target and GOMAXPROCS (unless GOGC and
// GOMAXPROCS are set) and, unless
// EnvKeepPages is 1, starts letting go of the binary's pages the agent does
// not use, in the background until ctx ends.
func Start(ctx context.Context, o Options) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(GCPercent)
	}
	if n, ok := procs(os.Getenv("GOMAXPROCS"), runtime.GOMAXPROCS(0)); ok {
		runtime.GOMAXPROCS(n)
	}
	if os.Getenv(EnvKeepPages) == "1" {
		return
	}
	go keepSmall(ctx, o.withDefaults())
}

func (o Options) withDefaults() Options {
	d := Defaults()
	if o.Settle <= 0 {
		o.Settle = d.Settle
	}
	if o.Drop <= 0 {
		o.Drop = d.Drop
	}
	if o.Unmap <= 0 {
		o.Unmap = d.Unmap
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return o
}

// refault is the wait between an unmapping and the page-cache drop after
// it: the agent's goroutines map the pages they use again from the cache
// meanwhile (minor faults), so the drop does not send them to the disk.
const refault = 2 * time.Second

// keepSmall unmaps the binary after Settle and every Unmap, and drops its
// unmapped pages from the page cache every Drop and soon after each unmapping.
func keepSmall(ctx context.Context, o Options) {
	if !sleep(ctx, o.Settle) {
		return
	}
	for tick := 0; ; tick++ {
		if unmapDue(tick, o.Drop, o.Unmap) {
			unmap(o.Log)
			if !sleep(ctx, refault) {
				return
			}
		}
		if err := DropBinaryCache(); err != nil {
			o.Log.Debug("the binary's pages were not dropped from the page cache", "err", err)
		}
		if !sleep(ctx, o.Drop) {
			return
		}
	}
}

// unmapDue tells whether the binary is unmapped at the drop tick (one every
// drop, the first at 0): at the first, and then once every unmap.
func unmapDue(tick int, drop, unmap time.Duration) bool {
	every := 1
	if drop > 0 && unmap > drop {
		every = int(unmap / drop)
	}
	return tick%every == 0
}

// unmap unmaps the binary and hands the heap's free pages back to the OS.
func unmap(log *slog.Logger) {
	before, _ := ReadSplit("self")
	n, err := UnmapBinary()
	if err != nil {
		log.Debug("the binary's pages were not unmapped", "err", err)
		return
	}
	debug.FreeOSMemory()
	after, _ := ReadSplit("self")
	log.Debug("unmapped the binary's read-only pages", "bytes", n, "rssKiBBefore", before.RSS, "rssKiBAfter", after.RSS)
}

// procs is the GOMAXPROCS an agent sets (ok) given the GOMAXPROCS
// environment variable and the runtime's current value: MaxProcs at most,
// and nothing when the environment chose.
func procs(env string, current int) (int, bool) {
	if env != "" || current <= MaxProcs {
		return current, false
	}
	return MaxProcs, true
}

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
