package plan

import (
	"fmt"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// Why a channel passes over a node (status.skipped[].reason).
const (
	SkipNotReady      = "NotReady"
	SkipUnschedulable = "Unschedulable"
	SkipNoAgent       = "NoAgent"
	SkipOtherChannel  = "OtherChannel"
	// SkipUnknown: no agent ever published the node's versions.
	SkipUnknown = "UnknownVersion"
)

// MaxSkipped is the most entries status.skipped lists (counts.skipped has them all).
const MaxSkipped = 100

// Heartbeat is what the fleet view saw of a node's agent heartbeat (its
// Lease), judged on the controller's own clock only: the renewTime in the
// Lease is written by the agent's clock and is never compared with the
// controller's. The controller notes when it first read each renewTime;
// any other renewTime, earlier or later, is a renewal.
type Heartbeat struct {
	// Reported: a Lease its node holds, with a renewTime, was read.
	Reported bool
	// SilentFor is how long the Lease has carried the renewTime read last,
	// since this controller first read it (a first read counts as a
	// renewal just seen).
	SilentFor time.Duration
	// TTL is how long its renewal counts as its Lease declares it
	// (HeartbeatTTL); 0: the caller's.
	TTL time.Duration
}

// Silent reports whether a heartbeat counts as gone: never reported, or
// not renewed for longer than it counts (Counts).
func (h Heartbeat) Silent(ttl time.Duration) bool { return !h.Reported || h.SilentFor > h.Counts(ttl) }

// Counts is how long the heartbeat's last renewal counts: its Lease's
// TTL, or ttl when longer or none was read.
func (h Heartbeat) Counts(ttl time.Duration) time.Duration { return max(ttl, h.TTL) }

// HeartbeatTTL is how long an agent's renewal counts, read from the
// duration its Lease declares: an agent with nothing to do renews less
// often and says so there. The duration is the agent's to write, so it
// is bounded: never less than short (three busy intervals, what the
// controller always allowed) nor more than long (three idle intervals).
// An agent that dies while idle is judged gone after at most long; one
// that dies holding a slot renewed with the short duration.
func HeartbeatTTL(declared, short, long time.Duration) time.Duration {
	return min(max(declared, short), max(long, short))
}

// Health is what the fleet view reads of a node behind the target beyond
// its metadata: its Node's Ready condition and spec.unschedulable, who
// cordoned it, and its agent's heartbeat.
type Health struct {
	Ready         bool
	Unschedulable bool
	CordonedBy    string // the drain package's cordoned-by annotation
	Agent         Heartbeat
	AgentTTL      time.Duration
}

// Skip decides whether a node behind the target is passed over, and why;
// nil means it may take a slot. A node slipway itself cordoned (a cordon
// left behind) is not skipped: its next upgrade cordons it anyway. now is
// the controller's clock, for the entry's Since only.
func Skip(node string, h Health, cordonOwner string, now time.Time) *v1.SkippedNode {
	skip := func(reason, msg string, args ...any) *v1.SkippedNode {
		return &v1.SkippedNode{Node: node, Reason: reason, Message: fmt.Sprintf(msg, args...), Since: metav1.NewTime(now)}
	}
	switch {
	case !h.Ready:
		return skip(SkipNotReady, "node %s is not Ready: it takes a slot once it is Ready again", node)
	case !h.Agent.Reported:
		return skip(SkipNoAgent, "no slipway agent has reported from node %s: check the agent DaemonSet's pod there (kubectl get pods -o wide, its tolerations and logs)", node)
	case h.Agent.Silent(h.AgentTTL):
		return skip(SkipNoAgent, "the slipway agent on node %s has not renewed its heartbeat for %s (more than %s): check its pod and logs",
			node, h.Agent.SilentFor.Round(time.Second), h.Agent.Counts(h.AgentTTL))
	case h.Unschedulable && h.CordonedBy != cordonOwner:
		return skip(SkipUnschedulable, "node %s was made unschedulable by someone else than slipway: uncordon it (kubectl uncordon %s) to let it upgrade", node, node)
	}
	return nil
}

// MergeSkipped is the new status.skipped: entries for the nodes just
// checked (nil in fresh: no longer skipped), the previous entries of nodes
// not checked again that are still behind, and the entries fixed decides
// without a check (a node of an earlier channel, a node no agent ever
// reported). An entry that keeps its reason keeps its Since. Sorted by
// node name, at most MaxSkipped entries; it also returns how many there are in all.
func MergeSkipped(prev []v1.SkippedNode, behind []Node, fresh map[string]*v1.SkippedNode, fixed []v1.SkippedNode) ([]v1.SkippedNode, int) {
	old := make(map[string]v1.SkippedNode, len(prev))
	for _, p := range prev {
		old[p.Node] = p
	}
	var out []v1.SkippedNode
	keep := func(e v1.SkippedNode) {
		if p, ok := old[e.Node]; ok && p.Reason == e.Reason {
			e.Since = p.Since
		}
		out = append(out, e)
	}
	for _, n := range behind {
		if e, checked := fresh[n.Name]; checked {
			if e != nil {
				keep(*e)
			}
		} else if p, ok := old[n.Name]; ok && checkedReason(p.Reason) {
			out = append(out, p)
		}
	}
	for _, e := range fixed {
		keep(e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	total := len(out)
	if len(out) > MaxSkipped {
		out = out[:MaxSkipped]
	}
	return out, total
}

// checkedReason reports whether reason comes from a check of the node
// (kept until the node is checked again), not from the node list.
func checkedReason(reason string) bool { return reason != SkipOtherChannel && reason != SkipUnknown }

// Unchecked are the skipped entries decided from the node list alone: the
// nodes an earlier channel holds (others: node -> channel) and the nodes
// whose version no agent ever published.
func Unchecked(mine []Node, others map[string]string, now time.Time) []v1.SkippedNode {
	var out []v1.SkippedNode
	for node, ch := range others {
		out = append(out, v1.SkippedNode{Node: node, Reason: SkipOtherChannel, Since: metav1.NewTime(now),
			Message: fmt.Sprintf("node %s follows channel %s, created earlier: a node follows one channel", node, ch)})
	}
	for _, n := range mine {
		if n.Version == "" {
			out = append(out, v1.SkippedNode{Node: n.Name, Reason: SkipUnknown, Since: metav1.NewTime(now),
				Message: fmt.Sprintf("no slipway agent ever published what node %s runs: check the agent DaemonSet's pod there", n.Name)})
		}
	}
	return out
}

// skippedSet is the names in st.Skipped.
func skippedSet(st v1.UpdateChannelStatus) map[string]bool {
	out := make(map[string]bool, len(st.Skipped))
	for _, s := range st.Skipped {
		out[s.Node] = true
	}
	return out
}
