package agentmem

import (
	"runtime/debug"
	"sync"
	"time"
)

// A burst of allocations (the fleet view's list of every node of a channel,
// every resync) grows the heap for a while after it: the garbage waits for
// the next collection, a collection during the burst sets the next target
// from a heap the burst inflated, and the pages the burst used stay
// resident until the runtime's background scavenger, which hands back
// slowly, gets to them. Handing the free pages back just after the burst
// keeps the heap near its live size; ReleaseHeap asks for that.

// heapReleaser runs debug.FreeOSMemory soon after a request, coalescing
// requests and at most once per gap.
type heapReleaser struct {
	mu         sync.Mutex
	enabled    bool
	pending    bool
	last       time.Time // when the heap was last handed back
	delay, gap time.Duration
	free       func()
	after      func(time.Duration, func()) // runs a function after a wait
}

// agentHeap is the process's releaser, which ReleaseHeap asks and Start enables.
var agentHeap = &heapReleaser{free: debug.FreeOSMemory, after: func(d time.Duration, f func()) { time.AfterFunc(d, f) }}

// ReleaseHeap asks for the heap's free pages to be handed back to the OS
// soon (Options.ReleaseDelay later, at most once per Options.ReleaseGap):
// the agent calls it after a burst of allocations whose garbage it will not
// need. It is cheap and safe for concurrent use. Without Start it does
// nothing.
func ReleaseHeap() { agentHeap.request(time.Now()) }

// enable turns the releaser on with o's timings.
func (r *heapReleaser) enable(o Options) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.enabled, r.delay, r.gap = true, o.ReleaseDelay, o.ReleaseGap
}

// request schedules a release unless one is pending or the releaser is
// off, and returns when it runs (zero when none was scheduled).
func (r *heapReleaser) request(now time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.enabled || r.pending {
		return time.Time{}
	}
	r.pending = true
	at := releaseAt(now, r.last, r.delay, r.gap)
	r.after(at.Sub(now), r.release)
	return at
}

func (r *heapReleaser) release() {
	r.free()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending, r.last = false, time.Now()
}

// releaseAt is when a release requested at now runs: delay later, and no
// sooner than gap after the last release.
func releaseAt(now, last time.Time, delay, gap time.Duration) time.Time {
	at := now.Add(delay)
	if earliest := last.Add(gap); earliest.After(at) {
		at = earliest
	}
	return at
}
