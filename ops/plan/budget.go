package plan

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// A channel's budget counts every node of the channel that is down, slot
// or not, as a DaemonSet's maxUnavailable counts every node whose pod is
// unavailable: a node NotReady (powered off, its kubelet stopped, a
// reboot of its own) or still cordoned by slipway spends one of the
// channel's concurrency as a slot does. The slots a pass may grant are
// concurrency minus the slots held minus those nodes, so a channel of
// concurrency 1 starts no node while one of its nodes is down.
//
// A node down for good would then hold its channel's rollout forever, so
// it must not be silent: the CapacityHeld condition names every node
// holding capacity; once one has been down longer than nodeReadyTimeout,
// its reason turns NodeDownTooLong and its message says what to do
// (delete the Node of a machine gone for good, or leave it out of the
// channel's nodeSelector), and the controller records an Event.

// ConditionCapacityHeld is True while nodes of the channel that hold no
// slot are down and spend its concurrency.
const ConditionCapacityHeld = "CapacityHeld"

// Availability is what the fleet view reads of one of a channel's nodes
// for its budget: Ready (the Ready condition is True), since when its
// Ready condition has had its status (zero: not known), and whether
// slipway's cordon is on it.
type Availability struct {
	Name              string
	Ready             bool
	ReadySince        time.Time
	CordonedBySlipway bool
}

// Down is a node of the channel that holds no slot and is unavailable.
type Down struct {
	Node string
	// Why: "NotReady" or "cordoned by slipway".
	Why string
	// Since is when it went NotReady (zero when not known, or only cordoned).
	Since time.Time
}

// Unavailable are the nodes (of nodes, the channel's) that spend the
// channel's budget without holding one of st's slots, sorted by name.
func Unavailable(st v1.UpdateChannelStatus, nodes []Availability) []Down {
	var out []Down
	for _, n := range nodes {
		switch {
		case FindSlot(st, n.Name) >= 0: // counted as its slot
		case !n.Ready:
			out = append(out, Down{Node: n.Name, Why: "NotReady", Since: n.ReadySince})
		case n.CordonedBySlipway:
			out = append(out, Down{Node: n.Name, Why: "cordoned by slipway"})
		}
	}
	slices.SortFunc(out, func(a, b Down) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// Names are the nodes of down.
func Names(down []Down) []string {
	out := make([]string, 0, len(down))
	for _, d := range down {
		out = append(out, d.Node)
	}
	return out
}

// FreeSlotsBeside is how many more nodes may start: concurrency minus the
// slots held minus down, the nodes down without a slot (Unavailable).
func FreeSlotsBeside(s Settings, st v1.UpdateChannelStatus, down int) int {
	return max(0, s.Concurrency-len(st.Updating)-max(down, 0))
}

// DownTooLong are the nodes of down that have been NotReady for longer
// than bound at now.
func DownTooLong(down []Down, bound time.Duration, now time.Time) []Down {
	var out []Down
	for _, d := range down {
		if !d.Since.IsZero() && d.Why == "NotReady" && now.Sub(d.Since) > bound {
			out = append(out, d)
		}
	}
	return out
}

// NextDownTooLong is when the next node of down passes bound (zero when
// none will): the pass that turns the condition's reason is due then.
func NextDownTooLong(down []Down, bound time.Duration, now time.Time) time.Time {
	var next time.Time
	for _, d := range down {
		if d.Since.IsZero() || d.Why != "NotReady" {
			continue
		}
		if at := d.Since.Add(bound); at.After(now) && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	return next
}

// SetCapacityHeld sets the CapacityHeld condition from down (Unavailable)
// and says whether the conditions changed. Its message names the nodes
// and why, never how long they have been down, so that a pass writes it
// only when the set of nodes (or whether one is down too long) changes.
func SetCapacityHeld(s Settings, st *v1.UpdateChannelStatus, down []Down, now time.Time, generation int64) bool {
	c := metav1.Condition{Type: ConditionCapacityHeld, Status: metav1.ConditionFalse, Reason: "AllAvailable",
		Message: "no node of this channel is down without a slot", ObservedGeneration: generation}
	if len(down) > 0 {
		names := make([]string, 0, len(down))
		for _, d := range down {
			names = append(names, d.Node+" ("+d.Why+")")
		}
		c.Status, c.Reason = metav1.ConditionTrue, "NodesUnavailable"
		c.Message = fmt.Sprintf("%s down without a slot: %d of concurrency %d spent, as a slot is, until they are back",
			strings.Join(names, ", "), len(down), s.Concurrency)
		if long := DownTooLong(down, s.NodeReadyTimeout, now); len(long) > 0 {
			c.Reason = "NodeDownTooLong"
			var ln []string
			for _, d := range long {
				ln = append(ln, d.Node)
			}
			c.Message += fmt.Sprintf("; %s NotReady for longer than nodeReadyTimeout (%s): delete the Node of a machine gone for good, or leave it out of the channel's nodeSelector to roll on without it",
				strings.Join(ln, ", "), s.NodeReadyTimeout)
		}
	}
	return meta.SetStatusCondition(&st.Conditions, c)
}

// MayCordon decides whether the channel's node self may be cordoned now
// (its drain begins): only while fewer than concurrency of the channel's
// other nodes (nodes) are unavailable, NotReady or cordoned by slipway,
// slot or not. A slot granted while all were up waits, held, when another
// node went down before its drain. It returns the nodes that spend the
// budget when it may not.
func MayCordon(s Settings, self string, nodes []Availability) (bool, []Down) {
	var spent []Down
	for _, n := range nodes {
		switch {
		case n.Name == self:
		case !n.Ready:
			spent = append(spent, Down{Node: n.Name, Why: "NotReady", Since: n.ReadySince})
		case n.CordonedBySlipway:
			spent = append(spent, Down{Node: n.Name, Why: "cordoned by slipway"})
		}
	}
	slices.SortFunc(spent, func(a, b Down) int { return strings.Compare(a.Node, b.Node) })
	if len(spent) < s.Concurrency {
		return true, nil
	}
	return false, spent
}
