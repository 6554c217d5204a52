package agentmem

import (
	"sync"
	"time"
)

// An agent's rollout work (its node's upgrade, drain, reboot and
// confirmation; the fleet view of a channel whose nodes hold slots) runs
// code it does not run when idle, and those pages stay mapped until the
// next unmapping, up to Options.Unmap later. An agent that says when it is
// busy with such work (SetBusy) is unmapped again Options.Quiet after it
// turns idle.

// activity is what the agent said of its work, and when it last turned idle.
type activity struct {
	mu        sync.Mutex
	busy      bool
	idleSince time.Time     // when it last turned from busy to idle; zero if never
	turned    chan struct{} // a token when it turns idle, for keepSmall
}

func newActivity() *activity { return &activity{turned: make(chan struct{}, 1)} }

// agentActivity is the process's agent's activity, which SetBusy reports.
var agentActivity = newActivity()

// SetBusy tells whether the agent is busy with rollout work now. It is
// cheap and safe for concurrent use: an agent calls it after every unit
// of work. Without Start, or with EnvKeepPages set, it changes nothing.
func SetBusy(busy bool) { agentActivity.set(busy, time.Now()) }

func (a *activity) set(busy bool, now time.Time) {
	a.mu.Lock()
	turnedIdle := a.busy && !busy
	a.busy = busy
	if turnedIdle {
		a.idleSince = now
	}
	a.mu.Unlock()
	if turnedIdle {
		select {
		case a.turned <- struct{}{}:
		default: // a token is already waiting
		}
	}
}

func (a *activity) state() (busy bool, idleSince time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.busy, a.idleSince
}

// idleUnmapAt is when the binary is unmapped because the agent turned idle
// (zero: no such unmapping is due): quiet after it turned idle, if that was
// after the last unmapping (the pages its busy spell mapped are still
// mapped), and no sooner than gap after that unmapping, so that an agent
// whose work comes and goes is not unmapped more often than that.
func idleUnmapAt(busy bool, idleSince, lastUnmap time.Time, quiet, gap time.Duration) time.Time {
	if busy || idleSince.IsZero() || !idleSince.After(lastUnmap) {
		return time.Time{}
	}
	at := idleSince.Add(quiet)
	if earliest := lastUnmap.Add(gap); earliest.After(at) {
		at = earliest
	}
	return at
}
