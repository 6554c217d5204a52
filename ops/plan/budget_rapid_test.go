package plan

import (
	"testing"

	"pgregory.net/rapid"
)

// budgetMachine is slotMachine with the channel's budget counting every
// node down, slot or not (budget.go): each pass gives AssignWith the
// nodes down without a slot, as the controller reads them, and no pass
// may grant a slot while slots and such nodes together reach concurrency.
type budgetMachine struct{ *slotMachine }

func (m budgetMachine) Assign(t *rapid.T) {
	var nodes []Availability
	for _, n := range m.nodes {
		nodes = append(nodes, Availability{Name: n.Name, Ready: !m.down[n.Name]})
	}
	down := Unavailable(m.st, nodes)
	before := len(m.st.Updating)
	checked := m.checked()
	added := AssignWith(m.s, &m.st, m.nodes, nil, checked, m.target, m.retry(), m.now, Beside{Down: Names(down)})
	if len(added) > 0 && len(m.st.Updating)+len(down) > m.s.Concurrency {
		t.Fatalf("granted %v beside %d slots held before and %v down without a slot: concurrency %d", added, before, down, m.s.Concurrency)
	}
	for _, d := range down {
		if FindSlot(m.st, d.Node) >= 0 && !contains(added, d.Node) {
			t.Fatalf("%s counted down and as a slot", d.Node)
		}
	}
	if after := Unavailable(m.st, nodes); len(added) > 0 && len(m.st.Updating)+len(after) > max(m.s.Concurrency, before+len(down)) {
		t.Fatalf("granted %v: %d slots and %v down, concurrency %d", added, len(m.st.Updating), after, m.s.Concurrency)
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func (m budgetMachine) Succeed(t *rapid.T)     { m.slotMachine.Succeed(t) }
func (m budgetMachine) Fail(t *rapid.T)        { m.slotMachine.Fail(t) }
func (m budgetMachine) Wait(t *rapid.T)        { m.slotMachine.Wait(t) }
func (m budgetMachine) Concurrency(t *rapid.T) { m.slotMachine.Concurrency(t) }
func (m budgetMachine) Flip(t *rapid.T)        { m.slotMachine.Flip(t) }
func (m budgetMachine) Check(t *rapid.T)       { m.slotMachine.Check(t) }

// TestBudgetCountsDownNodesRapid: whatever the sequence of passes,
// successes, failures, concurrency edits and nodes going NotReady and
// back, a pass never grants a slot that leaves the channel's slots plus
// its nodes down without a slot past concurrency (a DaemonSet's
// maxUnavailable), and never counts a slot holder twice.
func TestBudgetCountsDownNodesRapid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		t.Repeat(rapid.StateMachineActions(budgetMachine{newSlotMachine(t)}))
	})
}
