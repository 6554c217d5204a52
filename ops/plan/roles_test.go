package plan

import (
	"strings"
	"testing"
)

func TestServerHoldingBack(t *testing.T) {
	up := func(name string) ServerState { return ServerState{Name: name, ReadyStatus: "True"} }
	cases := []struct {
		name    string
		servers []ServerState
		node    string
		why     string
	}{
		{"no servers", nil, "", ""},
		{"all up", []ServerState{up("a"), up("b")}, "", ""},
		{"one NotReady", []ServerState{up("a"), {Name: "b", ReadyStatus: "False"}}, "b", "not Ready"},
		{"one unreachable", []ServerState{{Name: "c", ReadyStatus: "Unknown"}, up("a")}, "c", "stopped reporting"},
		{"no Ready condition yet", []ServerState{{Name: "a"}}, "a", "not Ready"},
		{"slipway's cordon left on a Ready server", []ServerState{up("a"), {Name: "b", ReadyStatus: "True", CordonedBySlipway: true}}, "b", "cordon"},
		{"the first by name of two down", []ServerState{{Name: "z", ReadyStatus: "False"}, {Name: "m", ReadyStatus: "Unknown"}}, "m", "stopped reporting"},
	}
	for _, c := range cases {
		node, why := ServerHoldingBack(c.servers)
		if node != c.node || !strings.Contains(why, c.why) || (c.node == "") != (why == "") {
			t.Errorf("%s: (%q, %q), want %q with %q", c.name, node, why, c.node, c.why)
		}
	}
}
