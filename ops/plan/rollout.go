package plan

import (
	"time"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// Behind returns the nodes that are behind target and hold no slot, in
// the order the fleet view checks them: servers first, then nodes with a
// failure at target, then the rest in slot order. Nodes whose version is
// unknown (no agent ever reported) are not behind: nothing knows what they run.
func Behind(st v1.UpdateChannelStatus, nodes []Node, target string) []Node {
	var servers, failed, rest []Node
	for _, n := range nodes {
		if target == "" || n.Version == "" || n.Version == target || FindSlot(st, n.Name) >= 0 {
			continue
		}
		switch i := FindFailure(st, n.Name); {
		case Server(n):
			servers = append(servers, n)
		case i >= 0 && st.Failed[i].Version == target:
			failed = append(failed, n)
		default:
			rest = append(rest, n)
		}
	}
	Order(servers, target)
	Order(failed, target)
	Order(rest, target)
	return append(append(servers, failed...), rest...)
}

// MustCheck reports whether the fleet view checks n however many slots are
// free: servers (they decide whether the other nodes may start) and nodes
// with a failure at target (a skipped one must not hold the rollout up).
func MustCheck(st v1.UpdateChannelStatus, n Node, target string) bool {
	if Server(n) {
		return true
	}
	i := FindFailure(st, n.Name)
	return i >= 0 && st.Failed[i].Version == target
}

// Assign updates st for one pass of the fleet view and returns the nodes
// it gave a slot. mine are the channel's nodes (selected, not followed by
// an earlier channel); others the nodes an earlier channel holds (node ->
// channel); checked the results of the checks of nodes behind (nil:
// eligible). A node takes a slot only when checked and not skipped, servers
// one at a time and before the others, never more than concurrency.
func Assign(s Settings, st *v1.UpdateChannelStatus, mine []Node, others map[string]string, checked map[string]*v1.SkippedNode,
	target string, retry Retry, now time.Time) []string {
	return AssignBeside(s, st, mine, others, checked, target, retry, now, false)
}

// AssignBeside is Assign with serverElsewhere: a server node of another
// channel holds a slot, which counts as one of this channel's server
// slots (one server down at a time across all channels).
func AssignBeside(s Settings, st *v1.UpdateChannelStatus, mine []Node, others map[string]string, checked map[string]*v1.SkippedNode,
	target string, retry Retry, now time.Time, serverElsewhere bool) []string {
	return AssignWith(s, st, mine, others, checked, target, retry, now, Beside{ServerElsewhere: serverElsewhere})
}

// Beside is what else takes a channel's capacity beside its own slots.
type Beside struct {
	// ServerElsewhere: a server node of another channel holds a slot, or
	// a server is down without one: a server slot taken.
	ServerElsewhere bool
	// Down are the channel's nodes down without a slot (Unavailable):
	// each spends one of its concurrency.
	Down []string
}

// AssignWith is Assign beside what b says is taken already.
func AssignWith(s Settings, st *v1.UpdateChannelStatus, mine []Node, others map[string]string, checked map[string]*v1.SkippedNode,
	target string, retry Retry, now time.Time, b Beside) []string {
	serverElsewhere := b.ServerElsewhere
	behind := Behind(*st, mine, target)
	var total int
	st.Skipped, total = MergeSkipped(st.Skipped, behind, checked, Unchecked(mine, others, now))
	skipped := skippedSet(*st)
	var eligible []Node
	for _, n := range Candidates(s, *st, mine, target, retry, now) {
		if e, ok := checked[n.Name]; ok && e == nil && !skipped[n.Name] {
			eligible = append(eligible, n)
		}
	}
	serversBehind, serverSlots := 0, 0
	for _, n := range mine {
		if !Server(n) || skipped[n.Name] {
			continue
		}
		if FindSlot(*st, n.Name) >= 0 {
			serverSlots++
			serversBehind++
		} else if n.Version != "" && n.Version != target {
			serversBehind++
		}
	}
	if serverElsewhere {
		serverSlots++
	}
	added := ClaimBeside(s, st, ServersFirst(eligible, serversBehind, serverSlots), target, now, b.Down)
	st.Counts = Counts(mine, *st, target)
	st.Counts.Skipped = total
	return added
}
