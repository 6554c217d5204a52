package updateoperator

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// fleetMachine drives the controller's pure decisions (Next for each
// node, then Starts over the fleet, as a turn composes them) through
// random sequences of what the agents, the hosts and the cluster do
// between turns: an intent acknowledged, carried out or failed, a drain
// ending or refused, a reboot that comes back on the new version or falls
// back, nodes going NotReady and back, workloads ready again, time
// passing, --max-concurrent changed. After every step it checks what the
// chaos monitor checks at process level, counted from the model's own
// state rather than by the functions under test:
//   - a turn never starts a node beyond --max-concurrent in flight;
//   - no node starts while NotReady, excluded, in its backoff, within the
//     pause after the last update ended, or to a release that failed on
//     --halt-after different nodes (the brake);
//   - reboot-update is wanted only of a node the operator cordoned and
//     drained, once its host performed;
//   - a node back on another version than its target is a failure of the
//     release (a fallback boot counts), and every failure lifts the cordon;
//   - an in-flight node past every timeout is never left without a step
//     (no slot held silently, NotReady ones included).
type fleetMachine struct {
	p     Policy
	f     Fleet
	now   time.Time
	nodes []NodeView
	// draining: the controller's drain of the node runs (the turns skip
	// it); release: the version offered; reboots: the hosts rebooting
	// (down, not back yet), with whether they fall back.
	draining map[string]bool
	release  string
	reboots  map[string]bool
	// failedOn: the release failures counted, per version, by node.
	failedOn map[string]map[string]bool
}

const rapidTimeout = time.Minute

func newFleetMachine(t *rapid.T) *fleetMachine {
	m := &fleetMachine{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), release: "v2",
		draining: map[string]bool{}, reboots: map[string]bool{}, failedOn: map[string]map[string]bool{}}
	to := Timeouts{Prepare: rapidTimeout, Perform: rapidTimeout, Reboot: rapidTimeout, Health: rapidTimeout, Reset: rapidTimeout}
	m.p = Policy{MaxConcurrent: rapid.IntRange(1, 3).Draw(t, "maxConcurrent"), HaltAfter: rapid.IntRange(0, 3).Draw(t, "haltAfter"),
		PauseBetween: time.Duration(rapid.IntRange(0, 2).Draw(t, "pauseSteps")) * 20 * time.Second,
		Backoff:      10 * time.Second, BackoffMax: 40 * time.Second, Timeouts: to}
	n := rapid.IntRange(2, 6).Draw(t, "nodes")
	for i := range n {
		m.nodes = append(m.nodes, NodeView{Name: fmt.Sprintf("n%d", i), Labelled: true, Spoke: true, Reports: true,
			Wanted: IntentStabilize, Active: IntentStabilize, State: StateUpdateAvailable, UpdateAvailable: true,
			Ready: true, Current: "v1", Available: "v2", BeforeDone: true, AfterDone: true,
			Excluded: rapid.Bool().Draw(t, fmt.Sprintf("excluded%d", i)) && i > 0})
	}
	return m
}

func (m *fleetMachine) pick(t *rapid.T) *NodeView {
	return &m.nodes[rapid.IntRange(0, len(m.nodes)-1).Draw(t, "node")]
}

// inFlight is the model's own count of the nodes holding a slot: an
// update under way (prepare, perform, reboot) or the operator's cordon.
func (m *fleetMachine) inFlight() (names []string) {
	for _, n := range m.nodes {
		if n.Wanted == IntentPrepare || n.Wanted == IntentPerform || n.Wanted == IntentReboot || n.CordonedByUs {
			names = append(names, n.Name)
		}
	}
	return names
}

// halted is the model's own brake: versions failed on HaltAfter nodes.
func (m *fleetMachine) halted(v string) bool {
	return m.p.HaltAfter > 0 && len(m.failedOn[v]) >= m.p.HaltAfter
}

// Turn is one turn of the controller: each node's step, then the starts.
func (m *fleetMachine) Turn(t *rapid.T) {
	for i := range m.nodes {
		n := &m.nodes[i]
		if m.draining[n.Name] {
			if StopDrain(*n) { // the perform failed on the host: its drain stops, no reboot follows
				m.draining[n.Name] = false
			}
			continue
		}
		m.apply(t, n, Next(*n, m.p, m.now))
	}
	before := m.inFlight()
	start, why := Starts(m.nodes, m.p, m.f, m.now)
	for _, name := range start {
		n := m.byName(name)
		switch {
		case !n.Ready:
			t.Fatalf("%s started while NotReady", name)
		case n.Excluded:
			t.Fatalf("%s started while excluded", name)
		case m.halted(n.Available):
			t.Fatalf("%s started to %s, which failed on %d nodes (halt after %d)", name, n.Available, len(m.failedOn[n.Available]), m.p.HaltAfter)
		case m.now.Before(BackoffUntil(*n, m.p)):
			t.Fatalf("%s started in its backoff (failures %d, last %s)", name, n.Failures, n.LastFailure)
		case m.p.PauseBetween > 0 && m.now.Before(m.f.LastDone.Add(m.p.PauseBetween)):
			t.Fatalf("%s started within the pause after the last update ended at %s", name, m.f.LastDone)
		case slices.Contains(before, name):
			t.Fatalf("%s started while in flight", name)
		}
		n.Wanted, n.Transition, n.Target = IntentPrepare, m.now, n.Available
	}
	if after := m.inFlight(); len(start) > 0 && len(after) > max(m.p.MaxConcurrent, 1) {
		t.Fatalf("started %v: %d in flight (%v), max-concurrent %d (before: %v)", start, len(after), after, m.p.MaxConcurrent, before)
	}
	if len(start) == 0 && why == "" {
		t.Fatalf("no start and no reason why")
	}
}

func (m *fleetMachine) byName(name string) *NodeView {
	for i := range m.nodes {
		if m.nodes[i].Name == name {
			return &m.nodes[i]
		}
	}
	panic("no node " + name)
}

// apply carries out a step on the model as the controller writes it.
func (m *fleetMachine) apply(t *rapid.T, n *NodeView, s Step) {
	fallback := n.Wanted == IntentReboot && n.Active == IntentReboot && n.State == StateReady && n.Target != "" && n.Current != "" && n.Current != n.Target
	if fallback && (s.Kind != StepFail || !s.Release) {
		t.Fatalf("%s back on %s, not its target %s: step %q (release %t), want a failure of the release", n.Name, n.Current, n.Target, s.Kind, s.Release)
	}
	if s.Kind == StepWant && s.Wanted == IntentReboot && (!n.CordonedByUs || !n.Drained || n.Active != IntentPerform || n.State != StateReady) {
		t.Fatalf("%s told reboot-update: cordoned %t drained %t, host at %s %s", n.Name, n.CordonedByUs, n.Drained, n.Active, n.State)
	}
	switch s.Kind {
	case StepNone, StepStuck:
	case StepWant:
		n.Wanted, n.Transition = s.Wanted, m.now
	case StepPerform:
		n.Wanted, n.Transition, n.CordonedByUs, n.Drained = IntentPerform, m.now, true, false
		m.draining[n.Name] = true
	case StepDrain:
		n.CordonedByUs = true
		m.draining[n.Name] = true
	case StepUncordon:
		n.CordonedByUs, n.Transition = false, m.now
	case StepFinish:
		if n.CordonedByUs {
			t.Fatalf("%s finished while still cordoned", n.Name)
		}
		n.Wanted, n.Transition, n.Finished, n.Failures, n.LastFailure, n.Target, n.Drained = IntentStabilize, m.now, m.now, 0, time.Time{}, "", false
		m.f.LastDone = m.now
	case StepFail:
		m.fail(n, s.Release)
	case StepAfter:
		n.AfterHook = true
	default:
		t.Fatalf("%s: unexpected step %q (%s)", n.Name, s.Kind, s.Reason)
	}
}

// fail is the controller's failure: counted, the cordon lifted, reset.
func (m *fleetMachine) fail(n *NodeView, release bool) {
	if release && n.Target != "" {
		if m.failedOn[n.Target] == nil {
			m.failedOn[n.Target] = map[string]bool{}
		}
		m.failedOn[n.Target][n.Name] = true
		if m.f.Failed == nil {
			m.f.Failed = map[string][]string{}
		}
		m.f.Failed[n.Target] = append(m.f.Failed[n.Target], n.Name)
	}
	n.Wanted, n.Transition, n.Failures, n.LastFailure = IntentReset, m.now, n.Failures+1, m.now
	n.CordonedByUs, n.Target, n.Drained = false, "", false
	m.f.LastDone = m.now
}

// Agent: a node's agent or host takes its next step: takes up the intent
// wanted, carries it out (or fails it), or comes back from its reboot.
func (m *fleetMachine) Agent(t *rapid.T) {
	var can []*NodeView
	for i := range m.nodes {
		n := &m.nodes[i]
		_, rebooting := m.reboots[n.Name]
		if rebooting || n.Active != n.Wanted || n.State == StateBusy && n.Active != IntentStabilize {
			can = append(can, n)
		}
	}
	if len(can) == 0 {
		t.Skip("no agent has anything to do")
	}
	n := can[rapid.IntRange(0, len(can)-1).Draw(t, "agent")]
	switch fallsBack, rebooting := m.reboots[n.Name]; {
	case rebooting: // back, on what it staged or (a fallback boot) on what it ran
		delete(m.reboots, n.Name)
		if !fallsBack && n.Staged != "" {
			n.Current = n.Staged
		}
		n.Staged, n.State = "", StateReady
		n.Ready = rapid.IntRange(0, 3).Draw(t, "backNotReady") != 0
		n.WorkloadsReady = rapid.Bool().Draw(t, "workloadsReady")
	case n.Active != n.Wanted: // takes up the intent
		n.Active, n.State = n.Wanted, StateBusy
		if n.Wanted == IntentStabilize {
			m.check(n)
		}
	case rapid.IntRange(0, 5).Draw(t, "hostFails") == 0:
		n.State = StateError
	case n.Active == IntentPrepare:
		n.State = StateReady
	case n.Active == IntentReset:
		n.State, n.Staged = StateReady, ""
	case n.Active == IntentPerform:
		n.State, n.Staged = StateReady, n.Target
	case n.Active == IntentReboot: // down now; back at a later step
		n.State, n.Ready = StateRebooting, false
		m.reboots[n.Name] = rapid.IntRange(0, 3).Draw(t, "fallsBack") == 0
	}
}

// check is the agent's check at rest: is the release newer?
func (m *fleetMachine) check(n *NodeView) {
	if n.Current != m.release {
		n.State, n.Available, n.UpdateAvailable = StateUpdateAvailable, m.release, true
		return
	}
	n.State, n.Available, n.UpdateAvailable = StateUpToDate, "", false
}

// DrainEnds: the controller's drain of a node ends: done, or refused (a
// failure that is not the release's).
func (m *fleetMachine) DrainEnds(t *rapid.T) {
	var can []*NodeView
	for i := range m.nodes {
		if m.draining[m.nodes[i].Name] {
			can = append(can, &m.nodes[i])
		}
	}
	if len(can) == 0 {
		t.Skip("no drain under way")
	}
	n := can[rapid.IntRange(0, len(can)-1).Draw(t, "drained")]
	m.draining[n.Name] = false
	if rapid.IntRange(0, 5).Draw(t, "drainFails") == 0 {
		m.fail(n, false)
		return
	}
	if n.Wanted == IntentPerform && n.CordonedByUs {
		n.Drained = true
	}
}

// Flip: a node goes NotReady, or comes back Ready (not mid-reboot).
func (m *fleetMachine) Flip(t *rapid.T) {
	n := m.pick(t)
	if _, rebooting := m.reboots[n.Name]; rebooting {
		t.Skip("rebooting")
	}
	n.Ready = !n.Ready
}

// Wait: time passes.
func (m *fleetMachine) Wait(t *rapid.T) {
	m.now = m.now.Add(time.Duration(rapid.IntRange(1, 90).Draw(t, "seconds")) * time.Second)
}

// Concurrency: an admin changes --max-concurrent (a controller restarted
// with another value).
func (m *fleetMachine) Concurrency(t *rapid.T) {
	m.p.MaxConcurrent = rapid.IntRange(1, 3).Draw(t, "maxConcurrent")
}

// Release: a newer release is offered (the brake holds only the versions
// that failed).
func (m *fleetMachine) Release(t *rapid.T) {
	if m.release == "v4" {
		t.Skip("enough releases")
	}
	m.release = map[string]string{"v2": "v3", "v3": "v4"}[m.release]
}

// Check runs after every step: no in-flight node past every timeout is
// left without a step (the controller's drain aside, which has its own
// timeout).
func (m *fleetMachine) Check(t *rapid.T) {
	for _, n := range m.nodes {
		if !slices.Contains(m.inFlight(), n.Name) || m.draining[n.Name] || m.now.Sub(n.Transition) <= rapidTimeout {
			continue
		}
		if s := Next(n, m.p, m.now); s.Kind == StepNone {
			t.Fatalf("%s in flight (wanted %s, host %s %s, ready %t, cordoned %t) for %s past every timeout, and no step",
				n.Name, n.Wanted, n.Active, n.State, n.Ready, n.CordonedByUs, m.now.Sub(n.Transition))
		}
	}
}

// TestDecisionsRapid: the update operator's decisions, composed as a turn
// composes them, under random agents, hosts and faults.
func TestDecisionsRapid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := newFleetMachine(t)
		actions := rapid.StateMachineActions(m)
		// The steps of an update are many: the turns and the agents'
		// steps are drawn more often than the faults, and the runs are
		// longer than Repeat's default.
		for _, a := range []string{"Turn", "Agent"} {
			for i := range 2 {
				actions[fmt.Sprintf("%s%d", a, i)] = actions[a]
			}
		}
		for range 4 {
			t.Repeat(actions)
		}
	})
}
