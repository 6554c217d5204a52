package updateoperator

import (
	"reflect"
	"testing"

	"slipway.dev/slipway/ops/window"
)

func TestPrepareAhead(t *testing.T) {
	avail := func(name string) NodeView { return node(name, IntentStabilize, IntentStabilize, StateUpdateAvailable) }
	with := func(n NodeView, f func(*NodeView)) NodeView { f(&n); return n }
	ahead := func(n NodeView) NodeView { n.Ahead = true; return n }
	updating := func(name string) NodeView { return node(name, IntentReboot, IntentReboot, StateRebooting) }
	on := func(p *Policy) { p.PrepareAhead, p.MaxConcurrent = true, 2 }
	tests := []struct {
		name    string
		nodes   []NodeView
		edit    func(*Policy)
		started []string
		want    []string
	}{
		{"off by default", []NodeView{updating("a"), avail("b")}, func(p *Policy) { p.MaxConcurrent = 2 }, nil, nil},
		{"the next max-concurrent candidates, in order", []NodeView{updating("a"), updating("b"), avail("e"), avail("c"), avail("d")}, on, nil, []string{"c", "d"}},
		{"not the ones Starts just started", []NodeView{updating("a"), avail("b"), avail("c"), avail("d")}, on, []string{"b"}, []string{"c", "d"}},
		{"those ahead count", []NodeView{updating("a"), ahead(node("b", IntentPrepare, IntentPrepare, StateBusy)), avail("c"), avail("d")}, on, nil, []string{"c"}},
		{"full: none", []NodeView{ahead(node("b", IntentPrepare, IntentPrepare, StateReady)), ahead(node("c", IntentPrepare, IntentPrepare, StateBusy)), avail("d")}, on, nil, nil},
		{"one ahead just started frees its place", []NodeView{ahead(node("b", IntentPrepare, IntentPrepare, StateReady)), ahead(node("c", IntentPrepare, IntentPrepare, StateReady)), avail("d")}, on, []string{"b"}, []string{"d"}},
		{"never the own node", []NodeView{updating("a"), with(avail("b"), func(n *NodeView) { n.Own = true })}, on, nil, nil},
		{"never in backoff", []NodeView{updating("a"), with(avail("b"), func(n *NodeView) { n.Failures, n.LastFailure = 1, t0 })}, on, nil, nil},
		{"not outside the window", []NodeView{updating("a"), avail("b")}, func(p *Policy) { on(p); p.Window = closedWindow(t) }, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := policy()
			tc.edit(&p)
			if got := PrepareAhead(tc.nodes, p, Fleet{}, t0, tc.started); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("PrepareAhead = %v, want %v", got, tc.want)
			}
		})
	}
}

// A node prepared ahead holds no slot until it is told perform-update.
func TestInFlightAhead(t *testing.T) {
	n := node("a", IntentPrepare, IntentPrepare, StateReady)
	if !InFlight(n) {
		t.Error("a node preparing in its own turn is in flight")
	}
	n.Ahead = true
	if InFlight(n) {
		t.Error("a node prepared ahead must not hold a slot")
	}
	n.CordonedByUs = true
	if !InFlight(n) {
		t.Error("a node with the operator's cordon holds a slot, ahead or not")
	}
	n = node("a", IntentPerform, IntentPerform, StateBusy)
	n.Ahead = true // a leftover key: perform counts
	if !InFlight(n) {
		t.Error("perform-update always holds a slot")
	}
}

func closedWindow(t *testing.T) *window.Window {
	w, err := window.Parse([]string{"sat"}, "01:00", "05:00", "UTC") // t0 is a Wednesday
	if err != nil {
		t.Fatal(err)
	}
	return w
}
