package plan

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"pgregory.net/rapid"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// slotMachine drives the fleet view's slot decisions (AssignBeside, then
// what the agents report: a success, a failure, a slot given back) through
// random sequences, checking after every step what must never happen.
type slotMachine struct {
	s       Settings
	st      v1.UpdateChannelStatus
	nodes   []Node
	down    map[string]bool // NotReady: skipped by the fleet view's checks
	target  string
	now     time.Time
	failedN map[string]int // failures at target written by Fail, per node
}

const rapidServers = 3

func newSlotMachine(t *rapid.T) *slotMachine {
	m := &slotMachine{target: "v2", now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), down: map[string]bool{}, failedN: map[string]int{}}
	m.s = Settings{Concurrency: rapid.IntRange(1, 4).Draw(t, "concurrency"), MaxFailures: rapid.IntRange(1, 3).Draw(t, "maxFailures"),
		Selector: labels.Everything()}
	n := rapid.IntRange(rapidServers, 8).Draw(t, "nodes")
	for i := range n {
		l := map[string]string{}
		if i < rapidServers {
			l["node-role.kubernetes.io/control-plane"] = "true"
		}
		m.nodes = append(m.nodes, Node{Name: fmt.Sprintf("n%d", i), UID: fmt.Sprintf("uid-%d", i), Labels: l, Version: "v1"})
	}
	return m
}

func (m *slotMachine) holder(t *rapid.T) (int, bool) {
	if len(m.st.Updating) == 0 {
		return 0, false
	}
	return rapid.IntRange(0, len(m.st.Updating)-1).Draw(t, "slot"), true
}

func (m *slotMachine) node(name string) *Node {
	for i := range m.nodes {
		if m.nodes[i].Name == name {
			return &m.nodes[i]
		}
	}
	return nil
}

// Assign is one pass of the fleet view: nodes down are checked NotReady.
func (m *slotMachine) Assign(t *rapid.T) { m.assign(t, false) }

// assign is Assign with serverElsewhere, as the controller passes it (a
// server holds a slot in another channel, or is down without one).
func (m *slotMachine) assign(t *rapid.T, serverElsewhere bool) {
	checked := m.checked()
	before := len(m.st.Updating)
	// Degraded as the pass sees it: a failed node now NotReady is skipped,
	// and a skipped node's failure does not hold the rollout up (by design).
	failures := 0
	for _, f := range m.st.Failed {
		if f.Version == m.target && !m.down[f.Node] {
			failures++
		}
	}
	degraded := failures >= m.s.MaxFailures
	serverSlot := m.serverSlots() > 0
	added := AssignBeside(m.s, &m.st, m.nodes, nil, checked, m.target, m.retry(), m.now, serverElsewhere)
	if len(added) > 0 && len(m.st.Updating) > m.s.Concurrency {
		t.Fatalf("%d slots after granting %v, concurrency %d", len(m.st.Updating), added, m.s.Concurrency)
	}
	if len(m.st.Updating) != before+len(added) {
		t.Fatalf("slots %d -> %d but %v added", before, len(m.st.Updating), added)
	}
	for _, a := range added {
		n := m.node(a)
		if n.Version == m.target {
			t.Fatalf("%s already at %s granted a slot", a, m.target)
		}
		if m.down[a] {
			t.Fatalf("%s NotReady granted a slot", a)
		}
		if Server(*n) && serverSlot {
			t.Fatalf("server %s granted a slot while another server held one", a)
		}
		if degraded && m.failedN[a] == 0 {
			t.Fatalf("%s, with no failure at %s, started while the channel is Degraded (%d failures, max %d)", a, m.target, failuresAt(m.st, m.target), m.s.MaxFailures)
		}
	}
}

// checked are the fleet view's checks of every node: the nodes down are NotReady.
func (m *slotMachine) checked() map[string]*v1.SkippedNode {
	checked := map[string]*v1.SkippedNode{}
	for _, n := range m.nodes {
		checked[n.Name] = nil
		if m.down[n.Name] {
			checked[n.Name] = &v1.SkippedNode{Node: n.Name, Reason: SkipNotReady}
		}
	}
	return checked
}

func (m *slotMachine) retry() Retry { return Retry{Base: time.Minute, Max: time.Hour} }

func (m *slotMachine) serverSlots() int {
	n := 0
	for _, sl := range m.st.Updating {
		if Server(*m.node(sl.Node)) {
			n++
		}
	}
	return n
}

// Succeed: a slot holder reports the target; its slot ends.
func (m *slotMachine) Succeed(t *rapid.T) {
	i, ok := m.holder(t)
	if !ok {
		t.Skip("no slot")
	}
	name := m.st.Updating[i].Node
	m.node(name).Version = m.target
	Succeed(&m.st, name)
	delete(m.failedN, name)
	if FindSlot(m.st, name) >= 0 || FindFailure(m.st, name) >= 0 {
		t.Fatalf("%s still holds a slot or a failure after its success", name)
	}
}

// Fail: a slot holder's upgrade fails; the failure must be counted.
func (m *slotMachine) Fail(t *rapid.T) {
	i, ok := m.holder(t)
	if !ok {
		t.Skip("no slot")
	}
	name := m.st.Updating[i].Node
	before := failuresAt(m.st, m.target)
	had := FindFailure(m.st, name) >= 0 && m.st.Failed[FindFailure(m.st, name)].Version == m.target
	Fail(&m.st, name, m.target, "test", m.now)
	m.failedN[name]++
	if FindSlot(m.st, name) >= 0 {
		t.Fatalf("%s still holds its slot after failing", name)
	}
	j := FindFailure(m.st, name)
	if j < 0 || m.st.Failed[j].Version != m.target || m.st.Failed[j].Attempts < m.failedN[name] {
		t.Fatalf("%s's failure not counted: %+v (failed %d times)", name, m.st.Failed, m.failedN[name])
	}
	if !had && failuresAt(m.st, m.target) != before+1 && !m.down[name] {
		t.Fatalf("failures at %s %d -> %d after %s's first failure", m.target, before, failuresAt(m.st, m.target), name)
	}
}

// Time passes (backoffs end).
func (m *slotMachine) Wait(t *rapid.T) {
	m.now = m.now.Add(time.Duration(rapid.IntRange(1, 120).Draw(t, "minutes")) * time.Minute)
}

// Concurrency changes (spec edited mid-rollout).
func (m *slotMachine) Concurrency(t *rapid.T) {
	m.s.Concurrency = rapid.IntRange(1, 4).Draw(t, "newConcurrency")
}

// A node goes NotReady or comes back.
func (m *slotMachine) Flip(t *rapid.T) {
	n := rapid.SampledFrom(m.nodes).Draw(t, "flip").Name
	m.down[n] = !m.down[n]
}

func (m *slotMachine) Check(t *rapid.T) {
	seen := map[string]bool{}
	for _, sl := range m.st.Updating {
		if seen[sl.Node] {
			t.Fatalf("%s holds two slots: %+v", sl.Node, m.st.Updating)
		}
		seen[sl.Node] = true
	}
	if m.serverSlots() > 1 {
		t.Fatalf("%d servers hold slots: %+v", m.serverSlots(), m.st.Updating)
	}
}

// TestSlotsRapid: whatever the sequence of passes, successes, failures,
// concurrency edits and nodes going NotReady, no pass grants past the
// concurrency, a node holds one slot at most, one server at most holds a
// slot and none starts beside another, a node at the target or NotReady
// never starts, a Degraded channel starts only retries, and every failure
// is counted.
func TestSlotsRapid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		t.Repeat(rapid.StateMachineActions(newSlotMachine(t)))
	})
}
