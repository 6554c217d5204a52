package plan

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
