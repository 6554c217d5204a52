// Package updateoperator is the node-annotation update operator: a
// controller (one leader among replicas) and an agent on every node that talk
// only through annotations and labels on Node objects, the protocol of the
// Bottlerocket update operator's Go era ("dogswatch"), prefix and all. The
// controller decides which node does what (the intent, action-wanted); the
// agent reports its host's update state and carries out the intent it is
// given, and takes no disruptive action on its own.
//
// This file is the protocol: every key, who writes it, and its values.
// Decisions live in decide.go (pure); handlers only read state and write the
// result.
package updateoperator

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Prefixes a cluster may speak. DefaultPrefix is slipway's own; the other two
// are the old operator's, for clusters moving over with nodes already
// annotated.
const (
	DefaultPrefix      = "update.slipway.dev"
	BottlerocketPrefix = "bottlerocket.aws"
	TharPrefix         = "thar.amazonaws.com"
)

// Key suffixes, joined to the prefix as <prefix>/<suffix>. W: who writes it.
const (
	// KeyActionWanted (annotation, W: controller) is the intent the
	// controller wants the node to carry out next.
	KeyActionWanted = "action-wanted"
	// KeyActionActive (annotation, W: agent) is the intent the agent is
	// carrying out or last carried out.
	KeyActionActive = "action-active"
	// KeyActionState (annotation, W: agent) is the host's update state.
	KeyActionState = "action-state"
	// KeyUpdateAvailable (annotation and label, W: agent) is "true" when the
	// host has an update to apply, "false" otherwise.
	KeyUpdateAvailable = "update-available"
	// KeyInterfaceVersion (label, W: controller for nodes whose osImage
	// matches --os-image-pattern, or an admin) schedules the agent DaemonSet.
	KeyInterfaceVersion = "updater-interface-version"
	// KeyExclude (label, W: admin) "true" keeps the operator off the node.
	KeyExclude = "exclude"
	// KeyCurrentVersion (annotation, W: agent) is the OS version running.
	KeyCurrentVersion = "current-version"
	// KeyStagedVersion (annotation, W: agent) is what the host's next boot
	// starts when that is not what runs (an update performed, not booted).
	KeyStagedVersion = "staged-version"
	// KeyTargetVersion (annotation, W: controller) is the version the
	// controller chose when it started the node's update: the update
	// succeeds only when the node comes back running it.
	KeyTargetVersion = "target-version"
	// KeyAvailableVersion (annotation, W: agent) is the version an update
	// would bring ("" when up to date).
	KeyAvailableVersion = "available-version"
	// KeyReason (annotation, W: agent on error, controller on a failure, a
	// timeout or a hold) says why the last step failed or waits. The agent
	// removes only its own; the controller's stays until the update ends
	// (a failure's, through the reset and the backoff) or the hold does.
	KeyReason = "reason"
	// KeyFailures (annotation, W: controller) counts the node's failed
	// updates since its last success; nodes with fewer go first, and each
	// failure doubles the wait before the next try.
	KeyFailures = "failures"
	// KeyLastFailure (annotation, W: controller) is when the last failure
	// was counted (RFC 3339).
	KeyLastFailure = "last-failure"
	// KeyTransition (annotation, W: controller) is when action-wanted last
	// changed (RFC 3339); timeouts count from it.
	KeyTransition = "transition-time"
	// KeyFinished (annotation, W: controller) is when the node's last update
	// finished (RFC 3339); the pause between nodes counts from the latest.
	KeyFinished = "update-finished"
	// KeyWorkloads (annotation, W: controller) lists the workloads that lost
	// pods in the node's drain (kind/namespace/name, comma separated); the
	// node's update finishes only once each is back to its desired ready count.
	KeyWorkloads = "drained-workloads"
	// KeyDrainStarted (annotation, W: controller) is when the node's drain
	// first started (RFC 3339): a drain resumed by a restarted or new leader
	// gets only what is left of --drain-timeout, so a controller restarted
	// again and again cannot keep a blocked drain going for ever.
	KeyDrainStarted = "drain-started"
	// KeyAhead (annotation, W: controller) "true" on a node told to
	// prepare-update ahead of its turn (--prepare-ahead): it holds no slot
	// until it is told perform-update, which removes the key.
	KeyAhead = "prepared-ahead"
	// KeyRebootBootID (annotation, W: agent) is the node's boot ID when the
	// agent asked for the reboot: a different one later means the reboot
	// happened.
	KeyRebootBootID = "reboot-boot-id"
	// KeyBeforeReboot and KeyAfterReboot (labels, W: controller) are "true"
	// while the node waits for the before- and after-reboot hooks: user
	// DaemonSets selecting them run checks, then set the annotations named by
	// --before-reboot-checks / --after-reboot-checks to "true" (W: the hooks;
	// the controller removes them when the wait ends).
	KeyBeforeReboot = "before-reboot"
	KeyAfterReboot  = "after-reboot"
)

// InterfaceVersion is the value of the interface-version label the agent
// DaemonSet selects: 2.0.0, as the old operator's host-API agents.
const InterfaceVersion = "2.0.0"

// Intent is a value of action-wanted and action-active.
type Intent string

// Intents, in the order an update goes through them.
const (
	IntentUnknown   Intent = "unknown"
	IntentStabilize Intent = "stabilize"      // check for updates; the resting intent
	IntentPrepare   Intent = "prepare-update" // download and verify, switch nothing
	IntentPerform   Intent = "perform-update" // make the next boot the new version
	IntentReboot    Intent = "reboot-update"  // reboot into it (after cordon and drain)
	IntentReset     Intent = "reset-state"    // forget a failed update
)

// State is a value of action-state.
type State string

// States an agent reports.
const (
	StateUnknown         State = "unknown"
	StateRefreshing      State = "refreshing"
	StateUpToDate        State = "up-to-date"
	StateUpdateAvailable State = "update-available"
	StateRebooting       State = "rebooting"
	StateReady           State = "ready" // the active intent is done
	StateBusy            State = "busy"  // the active intent is being carried out
	StateError           State = "error" // the active intent failed; see reason
)

var intents = map[Intent]bool{IntentUnknown: true, IntentStabilize: true, IntentPrepare: true,
	IntentPerform: true, IntentReboot: true, IntentReset: true}

var states = map[State]bool{StateUnknown: true, StateRefreshing: true, StateUpToDate: true,
	StateUpdateAvailable: true, StateRebooting: true, StateReady: true, StateBusy: true, StateError: true}

// ParseIntent reads an intent annotation: "" is unknown; anything not in
// the protocol is an error naming the values allowed.
func ParseIntent(s string) (Intent, error) {
	if s == "" {
		return IntentUnknown, nil
	}
	if !intents[Intent(s)] {
		return IntentUnknown, fmt.Errorf("intent %q is not one of stabilize, prepare-update, perform-update, reboot-update, reset-state, unknown", s)
	}
	return Intent(s), nil
}

// ParseState reads a state annotation: "" is unknown; anything not in the
// protocol is an error.
func ParseState(s string) (State, error) {
	if s == "" {
		return StateUnknown, nil
	}
	if !states[State(s)] {
		return StateUnknown, fmt.Errorf("state %q is not one of unknown, refreshing, up-to-date, update-available, rebooting, ready, busy, error", s)
	}
	return State(s), nil
}

// Keys are the protocol's keys under one prefix.
type Keys struct{ Prefix string }

// NewKeys checks prefix (a DNS subdomain, as a label key's prefix must be)
// and returns its keys. "" is DefaultPrefix.
func NewKeys(prefix string) (Keys, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if errs := validation.IsDNS1123Subdomain(prefix); len(errs) > 0 || strings.Contains(prefix, "/") {
		return Keys{}, fmt.Errorf("--prefix %q is not a DNS subdomain (%s): use %s, or %s / %s for nodes of the old operator",
			prefix, strings.Join(errs, "; "), DefaultPrefix, BottlerocketPrefix, TharPrefix)
	}
	return Keys{Prefix: prefix}, nil
}

// Key is <prefix>/<suffix>.
func (k Keys) Key(suffix string) string { return k.Prefix + "/" + suffix }

// Wanted, Active, State, ... are the full keys.
func (k Keys) Wanted() string           { return k.Key(KeyActionWanted) }
func (k Keys) Active() string           { return k.Key(KeyActionActive) }
func (k Keys) State() string            { return k.Key(KeyActionState) }
func (k Keys) UpdateAvailable() string  { return k.Key(KeyUpdateAvailable) }
func (k Keys) InterfaceVersion() string { return k.Key(KeyInterfaceVersion) }
func (k Keys) Exclude() string          { return k.Key(KeyExclude) }

// DefaultOSImagePattern matches the osImage of the nodes the controller
// labels for the agent: Bottlerocket and k3OS.
const DefaultOSImagePattern = `(?i)^(bottlerocket|k3os)`

// OldProgramNames start the binary as the old operator: argv[0] dogswatch
// or bottlerocket-update-operator.
var OldProgramNames = []string{"dogswatch", "bottlerocket-update-operator"}
