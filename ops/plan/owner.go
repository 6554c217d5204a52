package plan

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// ConditionConflict is True while an earlier channel selects some of this
// channel's nodes: those follow the earlier one and this one skips them.
const ConditionConflict = "Conflict"

// ChannelRef is what deciding a node's channel needs to know of a channel.
type ChannelRef struct {
	Name     string
	Created  time.Time
	Selector labels.Selector
}

// Ref is channel ch, with its resolved settings s, as Split orders it.
func Ref(ch *v1.UpdateChannel, s Settings) ChannelRef {
	return ChannelRef{Name: ch.Name, Created: ch.CreationTimestamp.Time, Selector: s.Selector}
}

// Refs are the valid channels of list: an invalid channel, or one being
// deleted, drives no node, so it holds none.
func Refs(list []*v1.UpdateChannel) []ChannelRef {
	var out []ChannelRef
	for _, ch := range list {
		if ch.DeletionTimestamp != nil {
			continue
		}
		if s, bad := Resolve(ch.Spec); bad == nil {
			out = append(out, Ref(ch, s))
		}
	}
	return out
}

// Earlier reports whether a comes before b: the older creationTimestamp,
// then the smaller name. Every agent orders channels the same way.
func Earlier(a, b ChannelRef) bool {
	if !a.Created.Equal(b.Created) {
		return a.Created.Before(b.Created)
	}
	return a.Name < b.Name
}

// Split returns the nodes that channel self drives and, for the others,
// the earlier channel that selects them (node -> channel): a node follows
// the earliest channel whose selector matches it. nodes are self's
// selected nodes; channels holds every valid channel of the namespace
// (self among them, or not: then self counts as the newest).
func Split(self ChannelRef, channels []ChannelRef, nodes []Node) (mine []Node, others map[string]string) {
	var earlier []ChannelRef
	for _, c := range channels {
		if c.Name != self.Name && Earlier(c, self) {
			earlier = append(earlier, c)
		}
	}
	sort.Slice(earlier, func(i, j int) bool { return Earlier(earlier[i], earlier[j]) })
	others = map[string]string{}
	for _, n := range nodes {
		owner := ""
		for _, c := range earlier {
			if c.Selector.Matches(labels.Set(n.Labels)) {
				owner = c.Name
				break
			}
		}
		if owner == "" {
			mine = append(mine, n)
		} else {
			others[n.Name] = owner
		}
	}
	return mine, others
}

// SetConflict records on the Conflict condition which earlier channels
// hold some of the selected nodes. It reports whether the condition turned
// True or its message changed (the handler then records an Event).
func SetConflict(st *v1.UpdateChannelStatus, others map[string]string, generation int64) bool {
	c := metav1.Condition{Type: ConditionConflict, Status: metav1.ConditionFalse, Reason: "NoConflict",
		Message: "no earlier channel selects this channel's nodes", ObservedGeneration: generation}
	if len(others) > 0 {
		byChannel := map[string]int{}
		for _, ch := range others {
			byChannel[ch]++
		}
		var parts []string
		for ch, n := range byChannel {
			parts = append(parts, fmt.Sprintf("%d on channel %s", n, ch))
		}
		sort.Strings(parts)
		c.Status, c.Reason = metav1.ConditionTrue, "NodesOfOtherChannels"
		c.Message = fmt.Sprintf("%d selected nodes follow a channel created earlier (%s) and are skipped here (status.skipped): "+
			"a node follows one channel; narrow spec.nodeSelector of one of them (for example a matchExpressions NotIn)",
			len(others), strings.Join(parts, ", "))
	}
	before := meta.FindStatusCondition(st.Conditions, ConditionConflict)
	changed := meta.SetStatusCondition(&st.Conditions, c)
	return changed && c.Status == metav1.ConditionTrue && (before == nil || before.Message != c.Message)
}
