// Package agentmem holds what the long-running agents (`slipway ops agent`
// and `slipway update-operator agent`, one process on every node) do about
// their memory, and how it is read. cmd/slipway calls Start for those two
// commands only.
//
// An agent's own memory is its anonymous memory (heap, the runtime's per-P
// caches, thread stacks): about 5.5 MiB, flat in the cluster's size, since
// each agent watches only its own Node. The rest of its RSS is clean pages
// of the binary, which the kernel reclaims under pressure like any page
// cache; unmapping and dropping them (what this package once did) lowered
// the RSS figure but saved no anonymous memory and no reclaim the kernel
// would not do itself (docs/agent.md, Memory, has the measurements with it
// on and off). What is left is what saves anonymous memory: a GC target of
// 50 %, a cap on GOMAXPROCS (each P keeps span caches and a GC worker), and
// the heap's free pages handed back after a burst of garbage (ReleaseHeap).
package agentmem

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"time"
)

// GCPercent is the Go GC target when GOGC is not set: an agent idles nearly
// always, and a heap grown 50 % over live data instead of 100 % keeps it
// smaller after a rollout's burst of watch events.
const GCPercent = 50

// MaxProcs caps the agents' GOMAXPROCS when the environment does not set
// it and Options.MaxProcs is zero: an idle agent's anonymous memory
// measured 5.1, 5.5, 6.4 and 6.9 MiB at GOMAXPROCS 1, 2, 8 and 32, and the
// agents' DaemonSets set no CPU limit (which the Go runtime would follow).
// Two keep the one parallel step an agent may run in process (the update
// operator's slipway platform stages a release: inflate and extract in a
// pipeline) parallel; an agent that runs nothing in parallel asks for 1.
const MaxProcs = 2

// Options tune Start; a zero field takes its default.
type Options struct {
	// MaxProcs caps GOMAXPROCS when the environment does not set it
	// (default MaxProcs).
	MaxProcs int
	// ReleaseDelay is how long after ReleaseHeap the heap's free pages are
	// handed back (default 1 s); ReleaseGap the least time between two
	// such releases (default 10 s).
	ReleaseDelay, ReleaseGap time.Duration
}

// Start sets the agent's GC target and GOMAXPROCS (unless GOGC and
// GOMAXPROCS are set) and enables ReleaseHeap.
func Start(_ context.Context, o Options) {
	if o.MaxProcs <= 0 {
		o.MaxProcs = MaxProcs
	}
	if o.ReleaseDelay <= 0 {
		o.ReleaseDelay = time.Second
	}
	if o.ReleaseGap <= 0 {
		o.ReleaseGap = 10 * time.Second
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(GCPercent)
	}
	if n, ok := procs(os.Getenv("GOMAXPROCS"), runtime.GOMAXPROCS(0), o.MaxProcs); ok {
		runtime.GOMAXPROCS(n)
	}
	agentHeap.enable(o)
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
