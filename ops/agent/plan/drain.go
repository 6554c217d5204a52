package plan

import (
	"strings"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// The drain is the controller's: a node's agent asks for it by reporting
// its slot Draining (after its upgrade Job staged the swap), the
// controller cordons and drains that node through the Eviction API and
// marks the slot Rebooting, which the node reads in its view and reboots.
// No agent may evict or delete a pod: RBAC cannot say "pods on my node".

// DrainsDue are the slots of st the controller must drain (or go on
// draining: a drain its former holder left half done resumes): those whose
// node asked for the drain, when the channel drains at all.
func DrainsDue(s Settings, st v1.UpdateChannelStatus) []v1.Slot {
	if !s.Drain.Enabled {
		return nil
	}
	var out []v1.Slot
	for _, sl := range st.Updating {
		if sl.Phase == PhaseDraining {
			out = append(out, sl)
		}
	}
	return out
}

// Cordon is what a Node says of slipway's cordon on it.
type Cordon struct {
	Node string
	// Owner is drain.slipway.dev/cordoned-by; For the namespace/channel the
	// controller cordoned it for (drain.slipway.dev/cordoned-for).
	Owner, For string
	// Since is when the drain that cordoned it began, as written
	// (drain.slipway.dev/drain-started, RFC 3339).
	Since string
}

// LeftCordoned names the nodes the controller of namespace cordoned (owner,
// for one of its channels) that hold no slot in any channel of namespace
// (held) and that no drain of its works on (draining): the controller
// uncordons them, whatever stopped the rollout that cordoned them (a slot
// taken away, a channel deleted, a controller killed mid-drain, an agent
// that never came back).
func LeftCordoned(nodes []Cordon, owner, namespace string, held, draining map[string]bool) []string {
	var out []string
	for _, n := range nodes {
		ns, _, _ := strings.Cut(n.For, "/")
		if n.Owner == owner && ns == namespace && !held[n.Node] && !draining[n.Node] {
			out = append(out, n.Node)
		}
	}
	return out
}
