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

// HoldBackDraining keeps out of st the Draining phase that this pass's
// fold brought in (before: the status before the fold) for the slots
// whose drain is not slow (shown: the nodes whose drain has run for a
// while): a quick drain goes from Upgrading to Rebooting in status with no
// write of its own, a slow one shows. It returns the slots whose node asked
// for its drain, held back or not: the drains to start.
func HoldBackDraining(st *v1.UpdateChannelStatus, before v1.UpdateChannelStatus, shown map[string]bool) (asked []v1.Slot) {
	for i := range st.Updating {
		sl := &st.Updating[i]
		if sl.Phase != PhaseDraining {
			continue
		}
		asked = append(asked, *sl)
		j := FindSlot(before, sl.Node)
		if j < 0 || !SameSlot(before.Updating[j], *sl) || before.Updating[j].Phase == PhaseDraining || shown[sl.Node] {
			continue
		}
		sl.Phase, sl.Job = before.Updating[j].Phase, before.Updating[j].Job
	}
	return asked
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
