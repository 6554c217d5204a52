package monitor

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"slipway.dev/slipway/ops/updateoperator"
)

// Names of the update operator's release rules.
const (
	InvOperatorBrake    = "update-operator-brake"            // a release failing on K nodes starts no more
	InvFallbackFailure  = "update-operator-fallback-failure" // a fallback boot is a failure, never a success
	defaultBrakeGracing = 3 * time.Second
)

// OperatorView is what the update operator's release rules read of a
// node: its protocol annotations.
type OperatorView struct {
	Wanted, Active  updateoperator.Intent
	State           updateoperator.State
	Current, Target string
}

// ReleaseFailure is a failed update of a node to a release, as the
// monitor observes it: the host failed an intent (its agent reports
// error while carrying out prepare, perform or reboot), or the node left
// reboot-update for reset-state not running the target (it fell back, or
// never came back). Refused drains and hooks are not the release's.
type ReleaseFailure struct {
	Node, Version string
	At            time.Time
}

// ReleaseStart is a node told to prepare or perform an update to Version
// after resting (stabilize, reset-state or nothing).
type ReleaseStart struct {
	Node, Version string
	At            time.Time
}

// ReleaseFinish is a node told to stabilize straight after reboot-update:
// the controller counted its update a success. Target is the version it
// was updating to, Current the version its agent reported then.
type ReleaseFinish struct {
	Node, Target, Current string
	At                    time.Time
}

// observeOperator derives the release events of one Node change (prev:
// its last version, ok false for none).
func observeOperator(node string, prev OperatorView, ok bool, n OperatorView, now time.Time) (fail *ReleaseFailure, start *ReleaseStart, fin *ReleaseFinish) {
	if !ok {
		return nil, nil, nil
	}
	flight := func(i updateoperator.Intent) bool {
		return i == updateoperator.IntentPrepare || i == updateoperator.IntentPerform || i == updateoperator.IntentReboot
	}
	resting := func(i updateoperator.Intent) bool {
		return i == "" || i == updateoperator.IntentStabilize || i == updateoperator.IntentReset || i == updateoperator.IntentUnknown
	}
	if n.State == updateoperator.StateError && prev.State != updateoperator.StateError && flight(n.Active) && n.Target != "" {
		fail = &ReleaseFailure{Node: node, Version: n.Target, At: now}
	}
	if prev.Wanted == updateoperator.IntentReboot && n.Wanted == updateoperator.IntentReset && prev.Target != "" && n.Current != prev.Target {
		fail = &ReleaseFailure{Node: node, Version: prev.Target, At: now}
	}
	if resting(prev.Wanted) && (n.Wanted == updateoperator.IntentPrepare || n.Wanted == updateoperator.IntentPerform) && n.Target != "" {
		start = &ReleaseStart{Node: node, Version: n.Target, At: now}
	}
	if prev.Wanted == updateoperator.IntentReboot && n.Wanted == updateoperator.IntentStabilize && prev.Target != "" {
		fin = &ReleaseFinish{Node: node, Target: prev.Target, Current: n.Current, At: now}
	}
	return fail, start, fin
}

// OperatorBrake: once a release has failed on Limits.OperatorHaltAfter
// different nodes, no node starts an update to it (after
// Limits.BrakeGrace, the controller's time to count the last failure).
// Each start past the brake is one finding.
func OperatorBrake(s State, l Limits) ([]Finding, error) {
	if l.OperatorHaltAfter <= 0 || len(s.ReleaseStarts) == 0 {
		return nil, nil
	}
	l = l.withDefaults()
	var out []Finding
	for _, st := range s.ReleaseStarts {
		var failed []string
		var halted time.Time
		for _, f := range s.ReleaseFailures { // in order of observation
			if f.Version != st.Version || slices.Contains(failed, f.Node) {
				continue
			}
			failed = append(failed, f.Node)
			if len(failed) == l.OperatorHaltAfter {
				halted = f.At
			}
		}
		if halted.IsZero() || st.At.Sub(halted) <= l.BrakeGrace {
			continue
		}
		objs := []string{nodeKey(st.Node)}
		for _, n := range failed {
			objs = append(objs, nodeKey(n))
		}
		out = append(out, Finding{Invariant: InvOperatorBrake, Key: st.Node + "@" + st.At.UTC().Format(time.RFC3339Nano),
			Message: fmt.Sprintf("node %s started an update to %s %s after it had failed on %d nodes (%s), --halt-after %d",
				st.Node, st.Version, st.At.Sub(halted).Round(time.Millisecond), len(failed), strings.Join(failed, ", "), l.OperatorHaltAfter),
			Objects: objs})
	}
	return out, nil
}

// FallbackIsFailure: the controller counts an update a success (the node
// told to stabilize straight after reboot-update) only when the node runs
// the version it was updating to: a node back on its previous version (a
// fallback boot) is a failure.
func FallbackIsFailure(s State, _ Limits) ([]Finding, error) {
	var out []Finding
	for _, f := range s.ReleaseFinishes {
		if f.Current == f.Target {
			continue
		}
		out = append(out, Finding{Invariant: InvFallbackFailure, Key: f.Node + "@" + f.At.UTC().Format(time.RFC3339Nano),
			Message: fmt.Sprintf("node %s's update to %s counted a success while it runs %q (a fallback boot is a failure)", f.Node, f.Target, f.Current),
			Objects: []string{nodeKey(f.Node)}})
	}
	return out, nil
}
