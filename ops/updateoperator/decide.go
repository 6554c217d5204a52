package updateoperator

import (
	"fmt"
	"sort"
	"time"

	"slipway.dev/slipway/ops/window"
)

// NodeView is what the decisions read of one Node: its protocol annotations
// parsed, plus the facts the controller looked up (workload health).
type NodeView struct {
	Name            string
	Wanted, Active  Intent
	State           State
	UpdateAvailable bool
	Ready           bool // the NodeReady condition is True
	CordonedByUs    bool // the operator holds a cordon on it
	Excluded        bool // labelled <prefix>/exclude=true
	// Labelled: the node carries the interface-version label (the agent
	// DaemonSet lands there); Spoke: an agent reported a state on it.
	Labelled, Spoke bool
	// OldAgent: the node's agent is the old operator's (Go brupop /
	// dogswatch): it answers stabilize with ready and never reports a
	// version, which slipway's agent always does.
	OldAgent bool
	// Reports: the node carries a current-version annotation (slipway's
	// agent writes one with every check; the old operator's never does).
	Reports     bool
	Own         bool // the controller runs on it
	Ahead       bool // told to prepare ahead of its turn (holds no slot yet)
	Failures    int
	LastFailure time.Time
	Transition  time.Time // action-wanted last changed
	Finished    time.Time // its last update finished
	// WorkloadsReady: every workload drained off it is back to its desired
	// ready count (looked up only for a node waiting on it).
	WorkloadsReady bool
	// BeforeHook / AfterHook: the before- / after-reboot label is on the
	// node; BeforeDone / AfterDone: every hook annotation is "true" (true
	// when no hook is configured).
	BeforeHook, AfterHook, BeforeDone, AfterDone bool
	// Blocked: a pod of the blocking-pod selector runs on it.
	Blocked bool
	// Current is the version the agent says runs; Target the version the
	// controller chose when the update started ("" for an update started
	// before the key existed: then it is not compared).
	Current, Target string
	// Available is the version an update would bring (the agent's
	// available-version): a halted release is not started.
	Available string
	// Staged is what the host's next boot starts (the agent's
	// staged-version): an update performed, not yet booted.
	Staged string
	// WantedInvalid: action-wanted itself could not be read (the node may
	// be anywhere in an update: it holds a slot until fixed).
	WantedInvalid bool
	// UnmarkedCordon: the node is unschedulable and no cordon record says
	// by whom (the old operator's cordons carry none; so do an admin's).
	UnmarkedCordon bool
	// Invalid, when set, says which annotation could not be read.
	Invalid string
	// Drained: the controller's drain for this perform-update ended (in
	// this process: a restarted controller drains again, finding nothing
	// left).
	Drained bool
	// Reason is the reason annotation: the agent's error while its state
	// is error, else the controller's last failure or hold.
	Reason string
}

// Timeouts bound every state a node can stick in.
type Timeouts struct {
	Prepare time.Duration // prepare-update acknowledged to ready
	Perform time.Duration // perform-update to ready
	Reboot  time.Duration // reboot-update to the node back Ready at ready
	Health  time.Duration // uncordoned to its drained workloads ready again
	Reset   time.Duration // reset-state to ready
}

// Policy is the rollout's configuration.
type Policy struct {
	MaxConcurrent int
	PauseBetween  time.Duration
	Window        *window.Window // nil: always open
	Backoff       time.Duration  // after a node's first failure; doubles after each next
	BackoffMax    time.Duration
	Timeouts      Timeouts
	// AdoptOldCordons: an unmarked cordon on a node told reboot-update is
	// the old operator's (it cordons before reboot-update and records
	// nothing): the controller records it as its own, so that it is lifted
	// when the update ends. On for the old operator's prefixes.
	AdoptOldCordons bool
	// PrepareAhead: while MaxConcurrent nodes update, up to MaxConcurrent
	// of the next candidates prepare (download and verify, nothing
	// switched), so each takes its slot at perform-update.
	PrepareAhead bool
	// HaltAfter: after this many failed updates to one target version
	// (the host's failures, fallback boots, timeouts), no node starts an
	// update to it (the brake); 0: never halted.
	HaltAfter int
}

// StepKind is what the controller does to one node.
type StepKind string

// Steps.
const (
	StepNone     StepKind = ""         // nothing to do now
	StepWant     StepKind = "want"     // write Step.Wanted as action-wanted
	StepPerform  StepKind = "perform"  // want perform-update in the write that cordons, and drain beside it
	StepDrain    StepKind = "drain"    // cordon, drain, then want reboot-update
	StepUncordon StepKind = "uncordon" // lift the operator's cordon (the node is back)
	StepFinish   StepKind = "finish"   // the update is done: want stabilize, record it (with Reason: past --health-timeout, said)
	StepFail     StepKind = "fail"     // count a failure, lift the cordon, want reset-state
	StepStuck    StepKind = "stuck"    // waiting too long: say so (reason, Event), change nothing
	StepAfter    StepKind = "after"    // label the node for the after-reboot hooks
	StepAdopt    StepKind = "adopt"    // record the old operator's cordon as the operator's
	StepTarget   StepKind = "target"   // take over an update the controller did not start: its clock, its target (Step.Version)
)

// Step is the decision for one node.
type Step struct {
	Kind   StepKind
	Wanted Intent
	Reason string
	// Release (a StepFail): the failure is the release's on this host
	// (the host failed an intent, fell back, or hung past a timeout),
	// counted against its target version by the brake. A refused drain
	// or a hook that never answered is not.
	Release bool
	// Version (a StepTarget) is the target adopted ("": none yet); Stamp:
	// transition-time is written (it was never).
	Version string
	Stamp   bool
}

// InFlight reports whether n takes one of the max-concurrent slots: an
// update under way, or a cordon of the operator still on it.
func InFlight(n NodeView) bool {
	if n.WantedInvalid { // where it is in an update is not known: unless its agent rests, it keeps its slot
		return n.CordonedByUs || n.Active != IntentStabilize && n.Active != IntentUnknown && n.Active != IntentReset
	}
	switch n.Wanted {
	case IntentPrepare:
		return !n.Ahead || n.CordonedByUs
	case IntentPerform, IntentReboot:
		return true
	}
	return n.CordonedByUs
}

// Next decides the next step of one node from its own state alone. Which
// idle nodes may start an update is decided by Starts, over the fleet.
func Next(n NodeView, p Policy, now time.Time) Step {
	if n.Invalid != "" {
		// Never a failure (its uncordon and reset-state could hit a node
		// mid-reboot): held as it is, said once, until the value is fixed.
		return Step{Kind: StepStuck, Reason: HeldPrefix + n.Invalid}
	}
	oldCordon := p.AdoptOldCordons && n.UnmarkedCordon && n.Transition.IsZero() && (n.Wanted == IntentPerform || n.Wanted == IntentReboot)
	if s, ok := takeOver(n); ok && !oldCordon { // the cordon's adoption stamps the clock first
		return s
	}
	done := n.Active == n.Wanted && n.State == StateReady
	failed := n.Active == n.Wanted && n.State == StateError
	age := now.Sub(n.Transition)
	switch n.Wanted {
	case IntentUnknown:
		if n.Excluded || !n.Labelled && !n.Spoke { // no agent will ever run there: nothing written
			return Step{}
		}
		return Step{Kind: StepWant, Wanted: IntentStabilize}
	case IntentStabilize:
		if n.CordonedByUs { // left over by an interrupted finish or failure
			return Step{Kind: StepUncordon}
		}
		if n.OldAgent && n.UpdateAvailable {
			return Step{Kind: StepStuck, Reason: OldAgentReason}
		}
		if OldAgentInError(n) && timedOut(age, p.Timeouts.Reset) {
			return Step{Kind: StepStuck, Reason: OldAgentErrorReason(n)}
		}
		return Step{}
	case IntentReset:
		return reset(n, p, age, done, failed)
	case IntentPrepare:
		if n.Ahead && done {
			return Step{} // prepared ahead: waits for a slot (Starts)
		}
		return progress(done, failed, n, age, p.Timeouts.Prepare, Step{Kind: StepPerform, Wanted: IntentPerform})
	case IntentPerform:
		if oldCordon { // the old operator cordons and drains at perform-update
			return Step{Kind: StepAdopt}
		}
		return performed(n, p, age, done, failed)
	case IntentReboot:
		if oldCordon { // never stamped by this controller: the old operator's
			return Step{Kind: StepAdopt}
		}
		return rebooted(n, p, age, done, failed)
	}
	return Step{}
}

// takeOver is the step that takes over an update under way that this
// controller did not start (the old operator's: no transition-time, no
// target-version): its timeouts count from now, not from a time never
// written (which would fail it at once), and its target is what the host
// reports it brings, once it does (AdoptedTarget).
func takeOver(n NodeView) (Step, bool) {
	inflight := n.Wanted == IntentPrepare || n.Wanted == IntentPerform || n.Wanted == IntentReboot
	failed := n.Active == n.Wanted && n.State == StateError // a failure needs no clock: taken as it is
	v, clock := AdoptedTarget(n), inflight && n.Transition.IsZero() && n.Invalid == "" && !failed
	if v == "" && !clock {
		return Step{}, false
	}
	s := Step{Kind: StepTarget, Version: v, Stamp: clock}
	switch {
	case v != "" && clock:
		s.Reason = fmt.Sprintf("took over the %s under way that this controller did not start: its timeouts count from now, and its target is %s, "+
			"what the host reports it brings (the update succeeds only if the node comes back running it)", n.Wanted, v)
	case v != "":
		s.Reason = fmt.Sprintf("the update under way has no target-version: its target is %s, what the host reports it brings "+
			"(the update succeeds only if the node comes back running it)", v)
	default:
		s.Reason = fmt.Sprintf("took over the %s under way that this controller did not start: its timeouts count from now; "+
			"its target is taken from the host's report once the agent gives one", n.Wanted)
	}
	return s, true
}

// AdoptedTarget is the target version an in-flight update without one
// takes on (the old operator started it, recording none): the version the
// host reports its next boot starts (staged-version), else, before the
// host switched anything (prepare-update, perform-update), the version the
// update brings (available-version). "" when the update has a target, is
// not in flight, or the host has not reported yet; a node at reboot-update
// with nothing staged has booted already, and there is nothing left to
// compare with.
func AdoptedTarget(n NodeView) string {
	if n.Target != "" || n.Invalid != "" {
		return ""
	}
	switch n.Wanted {
	case IntentPrepare, IntentPerform:
		if n.Staged != "" {
			return n.Staged
		}
		return n.Available
	case IntentReboot:
		if n.State == StateReady && n.Active == IntentReboot { // back already
			return ""
		}
		return n.Staged
	}
	return ""
}

// progress is the step of a node carrying out an intent: next when done,
// a failure on error or past the timeout.
func progress(done, failed bool, n NodeView, age, timeout time.Duration, next Step) Step {
	switch {
	case done:
		return next
	case failed:
		return Step{Kind: StepFail, Reason: hostFailure(n), Release: true}
	case timedOut(age, timeout):
		return Step{Kind: StepFail, Reason: fmt.Sprintf("%s not done after %s (agent state %s)", n.Wanted, timeout, n.State), Release: true}
	}
	return Step{}
}

// HeldPrefix begins the reason of a node held for an unreadable annotation
// or an agent slipway does not drive.
const HeldPrefix = "held: "

// OldAgentReason is why a node served by the old operator's agent is held.
const OldAgentReason = HeldPrefix + "this node's agent is the old operator's (bottlerocket-update-operator / dogswatch: " +
	"it answers stabilize with ready and reports no version), which slipway's controller does not drive; " +
	"replace it with slipway's agent (apply `slipway update-operator manifest --platform bottlerocket-api --prefix bottlerocket.aws` " +
	"and delete the old agent DaemonSet): the node is updated then"

// OldAgentInError reports whether n's agent looks like the old operator's
// left at error: its state is error for an intent other than the one
// wanted (slipway's agent acknowledges every intent, even at error) and it
// never reported a running version (slipway's agent always does). The old
// agent takes no intent while at error, reset-state included.
func OldAgentInError(n NodeView) bool {
	return n.State == StateError && n.Active != n.Wanted && !n.Reports
}

// OldAgentErrorReason is why a node whose old agent is stuck at error is
// held: the node, the intent it failed and what to do.
func OldAgentErrorReason(n NodeView) string {
	return fmt.Sprintf("%snode %s: its agent is the old operator's (bottlerocket-update-operator / dogswatch), left at error after %s; "+
		"it ignores %s (its own controller used to overwrite the agent's annotations), so slipway's controller cannot recover it. "+
		"Replace it with slipway's agent (apply `slipway update-operator manifest --platform bottlerocket-api --prefix bottlerocket.aws` "+
		"and delete the old agent DaemonSet): slipway's agent answers the reset and the node is updated then",
		HeldPrefix, n.Name, n.Active, n.Wanted)
}

// hostFailure is the reason of an intent the agent reported failed: the
// agent's own words kept in it (the failure's write replaces them).
func hostFailure(n NodeView) string {
	r := fmt.Sprintf("%s failed on the host", n.Wanted)
	if n.Reason != "" {
		r += ": " + n.Reason
	}
	return r
}

// rebooted is the step of a node told to reboot: wait for it to come back
// Ready at ready, lift the cordon, wait for its workloads, finish.
func rebooted(n NodeView, p Policy, age time.Duration, done, failed bool) Step {
	switch {
	case failed:
		return Step{Kind: StepFail, Reason: hostFailure(n), Release: true}
	case done && n.Target != "" && n.Current == "":
		return Step{Kind: StepFail, Reason: fmt.Sprintf("came back, but its agent reports no running version, so the chosen %s cannot be told from a fallback boot (the command platform needs --version-command)", n.Target)}
	case done && n.Target != "" && n.Current != n.Target:
		return Step{Kind: StepFail, Reason: fmt.Sprintf("came back running %s, not the chosen %s: the host booted its previous version (a fallback boot)", n.Current, n.Target), Release: true}
	case done && !n.Ready && timedOut(age, p.Timeouts.Reboot):
		// Back at the new version, then NotReady for good: a failure of
		// the release (counted by the brake), its cordon lifted (the
		// not-ready taint keeps pods off) and its slot to the next node.
		return Step{Kind: StepFail, Release: true, Reason: fmt.Sprintf("back at %s, but NotReady for %s after reboot-update (--state-timeout): failed, its slot freed, the operator's cordon lifted (the node's not-ready taint keeps pods off)",
			orUnknown(n.Current), p.Timeouts.Reboot)}
	case done && n.Ready && n.CordonedByUs:
		return Step{Kind: StepUncordon}
	case done && n.Ready && n.WorkloadsReady && n.AfterDone:
		return Step{Kind: StepFinish, Wanted: IntentStabilize}
	case done && n.Ready && n.WorkloadsReady && !n.AfterHook:
		return Step{Kind: StepAfter}
	case done && n.Ready:
		if timedOut(age, p.Timeouts.Health) { // the update is done; its slot goes to the next node
			why := "workloads drained off it not ready again"
			if n.WorkloadsReady {
				why = "after-reboot hooks not done"
			}
			return Step{Kind: StepFinish, Wanted: IntentStabilize, Reason: fmt.Sprintf("updated, but %s after %s (--health-timeout): moved on", why, p.Timeouts.Health)}
		}
		return Step{}
	case !done && timedOut(age, p.Timeouts.Reboot): // whoever lifted the cordon meanwhile
		return Step{Kind: StepFail, Reason: fmt.Sprintf("node not back Ready at the new version %s after reboot-update (agent state %s)", p.Timeouts.Reboot, n.State), Release: true}
	}
	return Step{}
}

// performed is the step of a node told perform-update. Its drain runs
// beside the host's perform (both can be undone: the uncordon, reset-state;
// the drain labels it for the before-reboot hooks when there are some);
// once the host performed, the drain ended and the hooks said yes, it
// reboots.
func performed(n NodeView, p Policy, age time.Duration, done, failed bool) Step {
	switch {
	case failed:
		return Step{Kind: StepFail, Reason: hostFailure(n), Release: true}
	case !done && timedOut(age, p.Timeouts.Perform):
		return Step{Kind: StepFail, Reason: fmt.Sprintf("%s not done after %s (agent state %s)", n.Wanted, p.Timeouts.Perform, n.State), Release: true}
	case !n.Drained || !n.CordonedByUs || !n.BeforeDone && !n.BeforeHook:
		return Step{Kind: StepDrain}
	case !done:
		return Step{}
	case n.BeforeDone:
		return Step{Kind: StepWant, Wanted: IntentReboot}
	case timedOut(age, p.Timeouts.Perform):
		return Step{Kind: StepFail, Reason: fmt.Sprintf("before-reboot hooks not done after %s", p.Timeouts.Perform)}
	}
	return Step{}
}

// StopDrain reports whether the drain under way on n is to be stopped:
// the perform-update it clears the node for failed, so no reboot follows.
func StopDrain(n NodeView) bool {
	return n.Wanted == IntentPerform && n.Active == IntentPerform && n.State == StateError
}

// reset is the step of a node told to discard a failed update: back to
// stabilize (a check, then a retry after its backoff) once the agent says
// the host is clean. A failed or unanswered reset rests it at stabilize
// too: the host's next prepare overwrites what was staged.
func reset(n NodeView, p Policy, age time.Duration, done, failed bool) Step {
	switch {
	case n.CordonedByUs:
		return Step{Kind: StepUncordon} // a failure's uncordon interrupted: lift it first
	case OldAgentInError(n) && timedOut(age, p.Timeouts.Reset):
		// Not answered, by an agent that never reports a version: the old
		// operator's, which ignores every intent while at error (its own
		// controller overwrote the agent's keys). Held, kept at reset-state
		// (no slot, no retry), until slipway's agent replaces it.
		return Step{Kind: StepStuck, Reason: OldAgentErrorReason(n)}
	case done, failed, timedOut(age, p.Timeouts.Reset):
		return Step{Kind: StepWant, Wanted: IntentStabilize}
	}
	return Step{}
}

func orUnknown(v string) string {
	if v == "" {
		return "an unknown version"
	}
	return v
}

func timedOut(age, timeout time.Duration) bool { return timeout > 0 && age > timeout }

// BackoffUntil is when a node with failures may be tried again: Backoff
// doubled per failure after the first, at most BackoffMax.
func BackoffUntil(n NodeView, p Policy) time.Time {
	if n.Failures <= 0 {
		return time.Time{}
	}
	d := p.Backoff
	for i := 1; i < n.Failures && d < p.BackoffMax; i++ {
		d *= 2
	}
	if p.BackoffMax > 0 && d > p.BackoffMax {
		d = p.BackoffMax
	}
	return n.LastFailure.Add(d)
}

// Starts decides which idle nodes start an update now (they get
// prepare-update) and, when none may, why. Never more than MaxConcurrent
// nodes are in flight; starts wait for the window and for PauseBetween after
// the last update ended (finished or failed: f.LastDone, which only the
// controller writes); a release the brake holds (f.Halted) is not started;
// candidates go fewest failures first, then by name; the controller's own
// node goes last, alone.
func Starts(nodes []NodeView, p Policy, f Fleet, now time.Time) (start []string, why string) {
	if p.Window != nil && !p.Window.Contains(now) {
		return nil, "outside the maintenance window until " + p.Window.Next(now).Format(time.RFC3339)
	}
	if f.AnalysisHold != "" { // a failed analysis, one that cannot be judged, or a bake
		return nil, f.AnalysisHold
	}
	inflight, preparing := 0, 0
	last := clampNow(f.LastDone, now)
	for _, n := range nodes {
		if InFlight(n) {
			inflight++
		}
		if n.Ahead && n.Wanted == IntentPrepare && !preparedAhead(n) {
			preparing++ // will want a slot: the own node does not go beside it
		}
	}
	max := max(p.MaxConcurrent, 1)
	if inflight >= max {
		return nil, fmt.Sprintf("%d of %d updates in flight", inflight, max)
	}
	if resume := last.Add(p.PauseBetween); p.PauseBetween > 0 && now.Before(resume) {
		return nil, "pausing between nodes until " + resume.Format(time.RFC3339)
	}
	cands := candidates(nodes, p, f, now)
	if len(cands) == 0 {
		if halted := f.Halted(p); len(halted) > 0 {
			return nil, f.HaltReason(halted[0], p)
		}
		return nil, "no node waits for an update"
	}
	for _, n := range cands {
		if len(start) == max-inflight {
			break
		}
		if n.Own && (inflight > 0 || len(start) > 0 || len(cands) > 1 || preparing > 0) {
			break // its own node last, alone
		}
		start = append(start, n.Name)
	}
	return start, ""
}

// candidates are the idle nodes with an update available, past their
// backoff, in the order they should go.
func candidates(nodes []NodeView, p Policy, f Fleet, now time.Time) []NodeView {
	halted := map[string]bool{}
	for _, v := range f.Halted(p) {
		halted[v] = true
	}
	var out []NodeView
	for _, n := range nodes {
		n.LastFailure = clampNow(n.LastFailure, now) // a node's own time holds only itself, and not past now
		idle := n.Wanted == IntentStabilize && n.Active == IntentStabilize && n.State == StateUpdateAvailable
		if !idle && !preparedAhead(n) || n.Excluded || n.Blocked || !n.Ready || n.Invalid != "" || InFlight(n) || now.Before(BackoffUntil(n, p)) ||
			halted[n.Available] {
			continue
		}
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Own != b.Own {
			return b.Own
		}
		if preparedAhead(a) != preparedAhead(b) {
			return preparedAhead(a)
		}
		if a.Failures != b.Failures {
			return a.Failures < b.Failures
		}
		return a.Name < b.Name
	})
	return out
}

// DrainBudget is how long a drain first started at started may still run
// at now under timeout: a drain resumed by a new leader does not start its
// timeout again. Spent, it is a moment (the drain then reports what still
// blocks it); a timeout of 0 (the drain's default) is passed on as is.
func DrainBudget(timeout time.Duration, started, now time.Time) time.Duration {
	if timeout <= 0 {
		return timeout
	}
	return max(timeout-now.Sub(started), time.Millisecond)
}
