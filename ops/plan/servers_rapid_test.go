package plan

import (
	"testing"

	"pgregory.net/rapid"
)

// serversMachine is slotMachine with one more rule: down is down, slot or
// not. A control-plane node that is NotReady (powered off, its slot ended
// by the Abandoned rule) counts against "one server at a time" as a server
// in a slot does: no other server may start beside it. Each pass gives
// AssignBeside what the controller's server gate gives it: a server
// holding no slot and down (ServerHoldingBack) is a server slot taken.
type serversMachine struct{ *slotMachine }

func (m serversMachine) Assign(t *rapid.T) {
	holding := map[string]bool{}
	for _, sl := range m.st.Updating {
		holding[sl.Node] = true
	}
	var states []ServerState
	downServer := ""
	for _, n := range m.nodes {
		if !Server(n) || holding[n.Name] {
			continue
		}
		ready := "True"
		if m.down[n.Name] {
			ready, downServer = "False", n.Name
		}
		states = append(states, ServerState{Name: n.Name, ReadyStatus: ready})
	}
	heldBy, _ := ServerHoldingBack(states)
	m.slotMachine.assign(t, heldBy != "")
	for _, sl := range m.st.Updating {
		if !holding[sl.Node] && Server(*m.node(sl.Node)) && downServer != "" {
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
// NotReady, the pure decisions composed as the controller composes them
// (its server gate, then AssignBeside).
func TestServersDownIsDownRapid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		t.Repeat(rapid.StateMachineActions(serversMachine{newSlotMachine(t)}))
	})
}
