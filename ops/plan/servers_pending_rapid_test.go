//go:build chaos_pending

package plan

import (
	"testing"

	"pgregory.net/rapid"
)

// serversMachine is slotMachine with one more rule: down is down, slot or
// not. A control-plane node that is NotReady (powered off, its slot ended
// by the Abandoned rule) counts against "one server at a time" as a server
// in a slot does: no other server may start beside it.
type serversMachine struct{ *slotMachine }

func (m serversMachine) Assign(t *rapid.T) {
	var downServer string
	for _, n := range m.nodes {
		if Server(n) && m.down[n.Name] && n.Version != m.target {
			downServer = n.Name
		}
	}
	before := map[string]bool{}
	for _, sl := range m.st.Updating {
		before[sl.Node] = true
	}
	m.slotMachine.Assign(t)
	for _, sl := range m.st.Updating {
		if !before[sl.Node] && Server(*m.node(sl.Node)) && downServer != "" {
			t.Fatalf("server %s granted a slot while server %s is NotReady: two control-plane nodes down", sl.Node, downServer)
		}
	}
}

func (m serversMachine) Succeed(t *rapid.T)     { m.slotMachine.Succeed(t) }
func (m serversMachine) Fail(t *rapid.T)        { m.slotMachine.Fail(t) }
func (m serversMachine) Wait(t *rapid.T)        { m.slotMachine.Wait(t) }
func (m serversMachine) Concurrency(t *rapid.T) { m.slotMachine.Concurrency(t) }
func (m serversMachine) Flip(t *rapid.T)        { m.slotMachine.Flip(t) }
func (m serversMachine) Check(t *rapid.T)       { m.slotMachine.Check(t) }

// TestServersDownIsDownRapid: no server starts while another server is
// NotReady (k3os: "a NotReady control-plane node does not stop the next
// server's slot"). Pending the fix in ops/plan.
func TestServersDownIsDownRapid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		t.Repeat(rapid.StateMachineActions(serversMachine{newSlotMachine(t)}))
	})
}
