package bootstate

import (
	"fmt"
	"slices"
	"time"
)

// Action is what the loader does this boot.
type Action string

const (
	// Boot boots current as it is: it is confirmed, or there is nothing to
	// fall back to.
	Boot Action = "boot"
	// Try boots current tentatively and counts the attempt.
	Try Action = "try"
	// FallBack abandons current and boots the fallback versions.
	FallBack Action = "fallback"
)

// Input is what the loader found in the system directory.
type Input struct {
	State    State
	Current  Versions // what the `current` links name
	Previous Versions // what the `previous` links name
	// Present reports whether a version folder exists; a fallback never
	// targets a missing folder.
	Present     func(rootfs bool, version string) bool
	MaxAttempts int
	Now         time.Time
}

// Decision is the loader's plan for this boot.
type Decision struct {
	Action Action
	// Boot is what to kexec into.
	Boot Versions
	// Relink is true when the `current` links must be pointed at Boot (and
	// `previous` at the abandoned version) before booting.
	Relink bool
	// State is the record to save before booting.
	State  State
	Reason string
}

// Decide applies the try-once rule. A current that equals the confirmed
// versions boots as is. Otherwise it is tentative: each boot increments its
// attempts, and once MaxAttempts boots did not confirm, the loader falls back
// to the confirmed versions (or, with no confirmed record, to previous).
// With nothing present to fall back to, current boots untracked.
func Decide(in Input) Decision {
	s := in.State
	cur := in.Current
	if cur == s.Confirmed {
		s.Tentative = nil
		return Decision{Action: Boot, Boot: cur, State: s, Reason: "current is confirmed"}
	}
	target, ok := fallbackTarget(in)
	if !ok {
		s.Tentative = nil
		return Decision{Action: Boot, Boot: cur, State: s, Reason: "current is unconfirmed but there is nothing to fall back to"}
	}
	t := Tentative{Versions: cur, Since: in.Now}
	if s.Tentative != nil && s.Tentative.Versions == cur {
		t = *s.Tentative
	}
	max := max(in.MaxAttempts, 1)
	if t.Attempts < max {
		t.Attempts++
		s.Tentative = &t
		return Decision{Action: Try, Boot: cur, State: s,
			Reason: fmt.Sprintf("tentative boot %d of %d", t.Attempts, max)}
	}
	reason := fmt.Sprintf("did not confirm within %d boot attempt(s)", t.Attempts)
	s.Abandoned = append(s.Abandoned, Abandoned{Versions: cur, Attempts: t.Attempts, Reason: reason, At: in.Now, FellBackTo: target})
	if n := len(s.Abandoned); n > maxAbandoned {
		s.Abandoned = slices.Clone(s.Abandoned[n-maxAbandoned:])
	}
	s.Tentative = nil
	if target != s.Confirmed {
		// Falling back to an unconfirmed previous: it gets its own attempt.
		s.Tentative = &Tentative{Versions: target, Attempts: 1, Since: in.Now}
	}
	return Decision{Action: FallBack, Boot: target, Relink: true, State: s, Reason: reason}
}

// fallbackTarget picks, per component, the confirmed version when there is
// one and it is present, else previous. A target equal to current, or one
// already abandoned, is no fallback.
func fallbackTarget(in Input) (Versions, bool) {
	pick := func(rootfs bool, confirmed, previous, current string) string {
		present := func(v string) bool { return v != "" && (in.Present == nil || in.Present(rootfs, v)) }
		switch {
		case present(confirmed):
			return confirmed
		case present(previous):
			return previous
		}
		return current
	}
	t := Versions{
		Rootfs: pick(true, in.State.Confirmed.Rootfs, in.Previous.Rootfs, in.Current.Rootfs),
		Kernel: pick(false, in.State.Confirmed.Kernel, in.Previous.Kernel, in.Current.Kernel),
	}
	if t == in.Current {
		return Versions{}, false
	}
	for _, a := range in.State.Abandoned {
		if a.Versions == t {
			return Versions{}, false
		}
	}
	return t, true
}
