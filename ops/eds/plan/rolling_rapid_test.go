package plan

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// rolloutMachine drives Rollout through a rollout's life: each step's plan
// applied (deleted pods Terminating, created pods not yet available), pods
// becoming available, crashing, finishing their termination, nodes being
// paused or frozen, checking after each step what must never happen.
type rolloutMachine struct {
	nodes []NodeState
	l     Limits
	seq   int
}

func newRolloutMachine(t *rapid.T) *rolloutMachine {
	m := &rolloutMachine{l: Limits{MaxUnavailable: rapid.IntRange(1, 3).Draw(t, "maxUnavailable"),
		MaxPodSchedulerFailure: rapid.IntRange(0, 1).Draw(t, "maxPodSchedulerFailure"), MaxCreation: rapid.IntRange(1, 3).Draw(t, "maxCreation")}}
	for i := range rapid.IntRange(1, 7).Draw(t, "nodes") {
		m.nodes = append(m.nodes, NodeState{Node: fmt.Sprintf("n%d", i), Template: "v2",
			Old: []Pod{{Name: fmt.Sprintf("old-%d", i), Available: rapid.Bool().Draw(t, "oldAvailable")}}})
	}
	return m
}

func unavailable(nodes []NodeState) int {
	n := 0
	for _, s := range nodes {
		if !nodeAvailable(s) {
			n++
		}
	}
	return n
}

// Step plans one step and applies it.
func (m *rolloutMachine) Step(t *rapid.T) {
	before := unavailable(m.nodes)
	p := Rollout(m.nodes, m.l)
	if m.l.Frozen && (len(p.Create) > 0 || len(p.Delete) > 0) {
		t.Fatalf("frozen, yet plan %+v", p)
	}
	if m.l.Paused && len(p.Delete) > 0 {
		t.Fatalf("paused, yet deletes %v", p.Delete)
	}
	inFlight := 0
	for _, n := range m.nodes {
		if n.Current != nil && !n.Current.Available && !n.Current.Terminating && !n.Current.Unresponsive {
			inFlight++
		}
	}
	if len(p.Create) > 0 && inFlight+len(p.Create) > m.l.MaxCreation {
		t.Fatalf("%d pods in creation plus %v created, maxCreation %d", inFlight, p.Create, m.l.MaxCreation)
	}
	for i := range m.nodes {
		n := &m.nodes[i]
		if slices.Contains(p.Create, n.Node) {
			if n.Current != nil || len(n.Old) > 0 {
				t.Fatalf("pod created on %s, which has %+v and old %+v: two pods on one node", n.Node, n.Current, n.Old)
			}
			m.seq++
			n.Current = &Pod{Name: fmt.Sprintf("new-%d", m.seq)}
		}
		for j := range n.Old {
			if slices.Contains(p.Delete, n.Old[j].Name) {
				n.Old[j].Terminating = true
			}
		}
		if n.Current != nil && slices.Contains(p.Delete, n.Current.Name) {
			t.Fatalf("the current template's pod %s deleted", n.Current.Name)
		}
	}
	after := unavailable(m.nodes)
	if after > before && after-p.Ignored > m.l.MaxUnavailable {
		t.Fatalf("deletions left %d nodes unavailable (was %d), maxUnavailable %d (+%d ignored): %v", after, before, m.l.MaxUnavailable, p.Ignored, p.Delete)
	}
}

func (m *rolloutMachine) pick(t *rapid.T) *NodeState {
	return &m.nodes[rapid.IntRange(0, len(m.nodes)-1).Draw(t, "node")]
}

// Ready: a new pod becomes available.
func (m *rolloutMachine) Ready(t *rapid.T) {
	if n := m.pick(t); n.Current != nil {
		n.Current.Available = true
	}
}

// Crash: a pod stops being available.
func (m *rolloutMachine) Crash(t *rapid.T) {
	n := m.pick(t)
	if n.Current != nil {
		n.Current.Available = false
	} else if len(n.Old) > 0 {
		n.Old[0].Available = false
	}
}

// Gone: terminating pods finish.
func (m *rolloutMachine) Gone(t *rapid.T) {
	n := m.pick(t)
	n.Old = slices.DeleteFunc(n.Old, func(p Pod) bool { return p.Terminating })
}

// Pause and Freeze toggle (the manual annotations, a canary's pause).
func (m *rolloutMachine) Pause(t *rapid.T)  { m.l.Paused = !m.l.Paused }
func (m *rolloutMachine) Freeze(t *rapid.T) { m.l.Frozen = !m.l.Frozen }

// Check: a node never runs a pod of the current template beside a live
// old one that is available (the new pod starts only once the old are gone).
func (m *rolloutMachine) Check(t *rapid.T) {
	for _, n := range m.nodes {
		if n.Current != nil && len(liveOld(n.Old)) > 0 {
			t.Fatalf("%s runs %s beside live old pods %+v", n.Node, n.Current.Name, n.Old)
		}
	}
}

// TestRolloutRapid: whatever pods do, a step never deletes an available
// pod past maxUnavailable, never puts two pods on one node, never creates
// past maxCreation, never deletes the current template's pod, and a pause
// or freeze holds.
func TestRolloutRapid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		t.Repeat(rapid.StateMachineActions(newRolloutMachine(t)))
	})
}
