// Package platform is the agent's view of its host: one small interface
// (check, prepare, perform, reboot, version, reset) and its three implementations:
// slipway (the k3os-layout host upgrader of upgrade/ against a release
// channel), bottlerocket-api (Bottlerocket's host API over its unix socket)
// and command (four user commands, for any other OS).
package platform

import (
	"context"
	"fmt"
)

// Status is what Check found.
type Status struct {
	Current   string // the version running
	Staged    string // what the next boot starts, when not Current ("" = the same)
	Available string // the version an update would bring; "" = up to date
}

// Platform carries out the protocol's intents on the host. Every method is
// idempotent: the agent may call it again after a restart.
type Platform interface {
	// Check refreshes the host's view of its updates.
	Check(ctx context.Context) (Status, error)
	// Prepare downloads and verifies the update; the next boot is unchanged.
	Prepare(ctx context.Context) error
	// Perform makes the next boot run the prepared update.
	Perform(ctx context.Context) error
	// Reboot reboots the host (returns when the reboot was asked for).
	Reboot(ctx context.Context) error
	// Version is the version running (after a reboot: the one booted,
	// which is not the one activated when the host fell back).
	Version(ctx context.Context) (string, error)
	// Reset discards an update prepared (or performed) but not booted, after
	// a failed update: the host is left as if no update had been started,
	// as far as the platform can undo it. The version running is untouched.
	Reset(ctx context.Context) error
}

// Names of the platforms, as --platform takes them.
const (
	NameSlipway      = "slipway"
	NameBottlerocket = "bottlerocket-api"
	NameCommand      = "command"
)

// UnknownError is the error for a --platform outside the three.
func UnknownError(name string) error {
	return fmt.Errorf("unknown --platform %q: use %s (k3os layout, --source), %s (--api-socket) or %s (--check-command ...)",
		name, NameSlipway, NameBottlerocket, NameCommand)
}
