package plan

import (
	"slices"
	"strings"
)

// Labels that make a node a server (control plane or embedded etcd): such
// nodes upgrade one at a time and before every other node, whatever the
// concurrency, so that a quorum of etcd members and API servers stays up.
var serverRoles = []string{
	"node-role.kubernetes.io/control-plane",
	"node-role.kubernetes.io/master",
	"node-role.kubernetes.io/etcd",
}

// Server reports whether n carries a control-plane or etcd role label (any value).
func Server(n Node) bool {
	for _, k := range serverRoles {
		if _, ok := n.Labels[k]; ok {
			return true
		}
	}
	return false
}

// ServersFirst narrows the ordered candidates to those that may start now:
// while a server is behind the target, only a server starts, and only when
// no server holds a slot; the other nodes start once no server is behind.
// serversBehind counts the channel's servers that are not at the target and
// not skipped (in a slot, waiting for a backoff, or candidates);
// serverSlots counts the slots servers hold.
func ServersFirst(candidates []Node, serversBehind, serverSlots int) []Node {
	if serversBehind == 0 {
		return candidates
	}
	if serverSlots > 0 {
		return nil
	}
	for _, n := range candidates {
		if Server(n) {
			return []Node{n}
		}
	}
	return nil
}

// ServerState is what the fleet view reads of a server node that holds no
// slot in any channel: its Node's Ready condition (ReadyStatus "True",
// "False", "Unknown" when its kubelet stopped reporting, "" when it has
// none) and whether slipway's cordon is on it.
type ServerState struct {
	Name              string
	ReadyStatus       string
	CordonedBySlipway bool
}

// ServerHoldingBack is the first (by name) of servers that is down without
// a slot, and why; "" when all are up. A server down counts as a server
// slot taken, in every channel: with a NotReady control-plane node (its
// slot released as abandoned, a shutdown that hung past the slot's age, a
// machine powered off) a second server taken down would leave two etcd
// members down at once. A server still cordoned by slipway is down too:
// it is between a drain and its uncordon, or its rollout failed there.
func ServerHoldingBack(servers []ServerState) (node, why string) {
	sorted := slices.Clone(servers)
	slices.SortFunc(sorted, func(a, b ServerState) int { return strings.Compare(a.Name, b.Name) })
	for _, s := range sorted {
		switch {
		case s.ReadyStatus == "Unknown":
			return s.Name, "its kubelet stopped reporting (Ready Unknown): unreachable or powered off"
		case s.ReadyStatus != "True":
			return s.Name, "it is not Ready"
		case s.CordonedBySlipway:
			return s.Name, "slipway's cordon is still on it"
		}
	}
	return "", ""
}

// ServerPeer is another server node, as read from the API server right
// before a server's drain cordons it or its reboot is permitted:
// SlotIn names a channel where it holds a slot ("" for none).
type ServerPeer struct {
	ServerState
	SlotIn string
}

// ServerMayGoDown decides, for the server node self about to be cordoned
// (or given its reboot), which other server holds it back, and why; ""
// when none does. The grant's gate (ServerHoldingBack) is read when the
// slot is granted; a server may go down between that grant and the
// drain, or between the drain and the reboot. So the step that takes
// self down asks again: another server holding a slot in any channel, or
// down without one (not Ready, unreachable, or still cordoned by
// slipway), keeps self up, its slot held, until that server is back.
func ServerMayGoDown(self string, peers []ServerPeer) (node, why string) {
	var down []ServerState
	sorted := slices.Clone(peers)
	slices.SortFunc(sorted, func(a, b ServerPeer) int { return strings.Compare(a.Name, b.Name) })
	for _, p := range sorted {
		switch {
		case p.Name == self:
		case p.SlotIn != "":
			return p.Name, "it holds a slot in channel " + p.SlotIn
		default:
			down = append(down, p.ServerState)
		}
	}
	return ServerHoldingBack(down)
}
