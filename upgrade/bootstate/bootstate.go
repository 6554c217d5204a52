// Package bootstate keeps the try-once boot record of a system directory:
// the versions that last came up and confirmed, the boot attempts of a
// tentative version (a `current` that differs from the confirmed one), and
// the versions abandoned because they never confirmed. Decide is the pure
// rule the early-boot loader applies; Load and Save read and write the
// record atomically.
package bootstate

import (
	"fmt"
	"strings"
	"time"
)

// FileName is the record's name inside the system directory.
const FileName = "boot-state.json"

// DefaultMaxAttempts is how many boots a tentative version gets before the
// loader falls back.
const DefaultMaxAttempts = 1

// maxAbandoned caps the history kept in the record.
const maxAbandoned = 10

// Versions names what boots: the rootfs (k3os/<v>) and the kernel
// (kernel/<v>). k3s is started by the rootfs and is not part of the boot
// chain.
type Versions struct {
	Rootfs string `json:"rootfs"`
	Kernel string `json:"kernel"`
}

// IsZero reports whether neither version is set.
func (v Versions) IsZero() bool { return v.Rootfs == "" && v.Kernel == "" }

func (v Versions) String() string {
	return fmt.Sprintf("rootfs %s kernel %s", orNone(v.Rootfs), orNone(v.Kernel))
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// Tentative is a version booted but not yet confirmed.
type Tentative struct {
	Versions
	// Attempts counts the boots handed to this version (incremented before
	// each kexec).
	Attempts int       `json:"attempts"`
	Since    time.Time `json:"since"`
}

// Abandoned is a version the loader gave up on.
type Abandoned struct {
	Versions
	Attempts int       `json:"attempts"`
	Reason   string    `json:"reason"`
	At       time.Time `json:"at"`
	// FellBackTo is what booted instead.
	FellBackTo Versions `json:"fellBackTo"`
}

// State is the whole record.
type State struct {
	// Confirmed is what last came up and ran `slipway ops confirm`.
	Confirmed   Versions   `json:"confirmed"`
	ConfirmedAt time.Time  `json:"confirmedAt,omitzero"`
	Tentative   *Tentative `json:"tentative,omitempty"`
	// Abandoned lists given-up versions, oldest first.
	Abandoned []Abandoned `json:"abandoned,omitempty"`
}

// LastAbandoned returns the newest abandoned version, if any.
func (s State) LastAbandoned() (Abandoned, bool) {
	if len(s.Abandoned) == 0 {
		return Abandoned{}, false
	}
	return s.Abandoned[len(s.Abandoned)-1], true
}

// Summary is one line for `slipway ops status`.
func (s State) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "boot: confirmed %s", s.Confirmed)
	if t := s.Tentative; t != nil {
		fmt.Fprintf(&b, "; tentative %s after %d attempt(s)", t.Versions, t.Attempts)
	}
	if a, ok := s.LastAbandoned(); ok {
		fmt.Fprintf(&b, "; abandoned %s at %s after %d attempt(s): %s", a.Versions,
			a.At.UTC().Format(time.RFC3339), a.Attempts, a.Reason)
	}
	return b.String()
}

// Confirm records that running came up healthy: it becomes the confirmed
// version and any tentative record ends.
func Confirm(s State, running Versions, now time.Time) State {
	s.Confirmed = running
	s.ConfirmedAt = now
	s.Tentative = nil
	return s
}
