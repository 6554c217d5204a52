package plan

import (
	"fmt"
	"time"
)

// The maintenance window gates the disruptive steps, not only the start of
// a slot. The rule: a drain starts only when the window stays open for the
// whole drain timeout plus the reboot delay, so that the reboot that
// follows falls inside it; and no reboot happens outside the window. A node
// whose turn comes too late in an opening gives its slot back, uncordoned,
// its swap rolled back, and is not counted as failed: it starts again in
// the next opening. Starting a slot needs the same room (a claim just
// before the window closes would only be given back).

// DrainNeeds is the time the window must still be open to start a drain:
// the drain's timeout (when draining) plus the reboot delay.
func DrainNeeds(s Settings) time.Duration {
	need := s.RebootDelay
	if s.Drain.Enabled {
		need += s.Drain.Timeout
	}
	return need
}

// MayStart reports whether a node may take a slot or start its drain at
// now: the window (if any) stays open at least DrainNeeds(s) from now. The
// reason says when it may, otherwise.
func MayStart(s Settings, now time.Time) (bool, string) {
	if s.Window == nil {
		return true, ""
	}
	left, need := s.Window.Remaining(now), DrainNeeds(s)
	if left > 0 && left >= need {
		return true, ""
	}
	next := s.Window.Next(now)
	if left > 0 { // open, but closing too soon: the opening after this one
		next = s.Window.Next(now.Add(left))
	}
	if left == 0 {
		return false, fmt.Sprintf("outside the maintenance window (next opening %s)", next.UTC().Format(time.RFC3339))
	}
	return false, fmt.Sprintf("the maintenance window closes in %s, before the drain (up to %s) and the reboot delay (%s) would end; next opening %s",
		left.Round(time.Second), s.Drain.Timeout, s.RebootDelay, next.UTC().Format(time.RFC3339))
}

// MayReboot reports whether a node may reboot at now: inside the window.
func MayReboot(s Settings, now time.Time) (bool, string) {
	if s.Window.Contains(now) {
		return true, ""
	}
	return false, fmt.Sprintf("the maintenance window closed before the reboot (next opening %s)", s.Window.Next(now).UTC().Format(time.RFC3339))
}
