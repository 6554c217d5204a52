package agentmem

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"
)

// refault is the wait between an unmapping and the page-cache drop after
// it: the agent's goroutines map the pages they use again from the cache
// meanwhile (minor faults), so the drop does not send them to the disk.
const refault = 2 * time.Second

// keeper is Start's background work: when to unmap the binary and drop its
// pages from the page cache, and doing it.
type keeper struct {
	o       Options
	act     *activity
	refault time.Duration
	unmap   func() // unmaps the binary and hands the heap's free pages back
	drop    func() // drops the binary's unmapped pages from the page cache
}

func newKeeper(o Options, act *activity) *keeper {
	return &keeper{o: o, act: act, refault: refault,
		unmap: func() { unmap(o.Log) }, drop: func() { dropCache(o.Log) }}
}

// run unmaps the binary after Settle and every Unmap, and Quiet after the
// agent turns idle (idleUnmapAt); it drops the binary's unmapped pages
// from the page cache every Drop and soon after each unmapping. It returns
// when ctx ends.
func (k *keeper) run(ctx context.Context) {
	if !sleep(ctx, k.o.Settle) {
		return
	}
	var lastUnmap time.Time
	nextDrop := time.Now()
	for tick := 0; ; {
		now := time.Now()
		busy, idleSince := k.act.state()
		idleAt := idleUnmapAt(busy, idleSince, lastUnmap, k.o.Quiet, k.o.Gap)
		switch {
		case !now.Before(nextDrop):
			if unmapDue(tick, k.o.Drop, k.o.Unmap) {
				lastUnmap = now
				if !k.unmapAndRefault(ctx) {
					return
				}
			}
			k.drop()
			tick++
			nextDrop = time.Now().Add(k.o.Drop)
		case !idleAt.IsZero() && !now.Before(idleAt):
			lastUnmap = now
			if !k.unmapAndRefault(ctx) {
				return
			}
			k.drop()
		default:
			if !waitUntil(ctx, earliest(nextDrop, idleAt), k.act.turned) {
				return
			}
		}
	}
}

// unmapAndRefault unmaps the binary, then waits refault (false when ctx ended).
func (k *keeper) unmapAndRefault(ctx context.Context) bool {
	k.unmap()
	return sleep(ctx, k.refault)
}

func dropCache(log *slog.Logger) {
	if err := DropBinaryCache(); err != nil {
		log.Debug("the binary's pages were not dropped from the page cache", "err", err)
	}
}

// earliest is the earlier of t and u, ignoring a zero u.
func earliest(t, u time.Time) time.Time {
	if !u.IsZero() && u.Before(t) {
		return u
	}
	return t
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

// waitUntil waits until t, a token on wake, or the end of ctx (false).
func waitUntil(ctx context.Context, t time.Time, wake <-chan struct{}) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
	case <-wake:
	}
	return true
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
