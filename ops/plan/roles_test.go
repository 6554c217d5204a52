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

func TestServerMayGoDown(t *testing.T) {
	peer := func(name, ready string, cordoned bool, slotIn string) ServerPeer {
		return ServerPeer{ServerState: ServerState{Name: name, ReadyStatus: ready, CordonedBySlipway: cordoned}, SlotIn: slotIn}
	}
	cases := []struct {
		name  string
		self  string
		peers []ServerPeer
		node  string
		why   string
	}{
		{"alone", "a", nil, "", ""},
		{"the others up", "a", []ServerPeer{peer("b", "True", false, ""), peer("c", "True", false, "")}, "", ""},
		{"itself cordoned, with its slot (a drain resumed)", "a", []ServerPeer{peer("a", "True", true, "default"), peer("b", "True", false, "")}, "", ""},
		{"itself NotReady (it is the one going down)", "a", []ServerPeer{peer("a", "False", false, ""), peer("b", "True", false, "")}, "", ""},
		{"another went NotReady after the grant", "a", []ServerPeer{peer("b", "False", false, ""), peer("c", "True", false, "")}, "b", "not Ready"},
		{"another unreachable", "c", []ServerPeer{peer("a", "True", false, ""), peer("b", "Unknown", false, "")}, "b", "stopped reporting"},
		{"another still cordoned by slipway", "a", []ServerPeer{peer("b", "True", true, "")}, "b", "cordon"},
		{"another holds a slot in another channel", "a", []ServerPeer{peer("b", "True", false, "canary")}, "b", "slot in channel canary"},
		{"a slot before a NotReady one, by name", "a", []ServerPeer{peer("c", "False", false, ""), peer("b", "True", false, "canary")}, "b", "slot"},
	}
	for _, c := range cases {
		node, why := ServerMayGoDown(c.self, c.peers)
		if node != c.node || !strings.Contains(why, c.why) || (c.node == "") != (why == "") {
			t.Errorf("%s: (%q, %q), want %q with %q", c.name, node, why, c.node, c.why)
		}
	}
}
