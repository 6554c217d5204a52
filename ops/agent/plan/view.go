package plan

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// A node's instructions: no agent reads the channels. For every channel
// that concerns a node (the channel it follows, and any channel where it
// holds a slot or a staging permit) the controller writes a View on that
// node's own Node (one annotation per channel, keyed by the channel's
// UID), and the agent reads only its own Node. A channel's status write
// then reaches the nodes it changes, not every node.

// View is what one node needs of one channel: its identity and spec, its
// target, the resolved release, and the node's own slot and staging permit.
type View struct {
	Namespace string               `json:"namespace"`
	Name      string               `json:"name"`
	Created   metav1.Time          `json:"created"`
	Spec      v1.UpdateChannelSpec `json:"spec"`
	// LatestVersion is the channel's newest release, when it follows it (its target then).
	LatestVersion string `json:"latestVersion,omitempty"`
	// Resolved is the channel's resolved release, when it is of the target.
	Resolved *v1.ResolvedRelease `json:"resolved,omitempty"`
	// Slot is the node's slot with the phases the controller decides:
	// Upgrading (granted) or Rebooting (drained, or the node went on to its
	// reboot); the node's own reports carry the others, so the controller's
	// folds of them do not write the view again.
	Slot *v1.Slot `json:"slot,omitempty"`
	// Permit is the node's staging permit.
	Permit *v1.StagePermit `json:"permit,omitempty"`
}

// ViewOf is node's view of ch, and false when ch does not concern node:
// node neither follows ch nor holds a slot or a staging permit in it.
func ViewOf(ch *v1.UpdateChannel, node string, follows bool) (View, bool) {
	v := View{Namespace: ch.Namespace, Name: ch.Name, Created: ch.CreationTimestamp, Spec: ch.Spec}
	s, _ := Resolve(ch.Spec)
	if Following(s) { // a pinned channel's views do not change with its polls
		v.LatestVersion = ch.Status.LatestVersion
	}
	if r := ch.Status.Resolved; r != nil && r.Version != "" && r.Version == Target(s, ch.Status) {
		rr := *r
		v.Resolved = &rr
	}
	if i := FindSlot(ch.Status, node); i >= 0 {
		sl := ch.Status.Updating[i]
		switch {
		case phaseOrder[sl.Phase] >= phaseOrder[PhaseRebooting]:
			sl.Phase = PhaseRebooting
		case phaseOrder[sl.Phase] > phaseOrder[PhaseUpgrading]:
			sl.Phase = PhaseUpgrading
		}
		v.Slot = &sl
	}
	if i := FindPermit(ch.Status, node); i >= 0 {
		p := ch.Status.Staging[i]
		v.Permit = &p
	}
	return v, follows || v.Slot != nil || v.Permit != nil
}

// EndedOnly reports whether the view cur differs from want only by what
// the node's report r says is over: a slot it reported ended (its success,
// failure or deferral) and a staging permit it gave back. Such a view stays
// until the node's view changes for another reason: the node acts on its
// report, not on a slot it ended or a permit it gave back, and the
// controller saves a write per node and slot, and per node and permit.
func EndedOnly(cur, want string, r Report) bool {
	c, err := ParseView(cur)
	if err != nil {
		return false
	}
	w, err := ParseView(want)
	if err != nil {
		return false
	}
	over := false
	if c.Slot != nil && w.Slot == nil {
		if _, outcome := r.Of(*c.Slot); outcome != "" {
			c.Slot, over = nil, true
		}
	}
	if c.Permit != nil && w.Permit == nil && r.PermitDone != nil && r.PermitDone.Unix() == c.Permit.Since.Unix() {
		c.Permit, over = nil, true
	}
	return over && c.String() == w.String()
}

// String is the annotation's value.
func (v View) String() string {
	b, _ := json.Marshal(v) // plain structs: cannot fail
	return string(b)
}

// ParseView reads a view annotation.
func ParseView(s string) (View, error) {
	var v View
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return View{}, fmt.Errorf("the channel view annotation is not JSON: %w", err)
	}
	if v.Name == "" {
		return View{}, fmt.Errorf("the channel view annotation names no channel")
	}
	return v, nil
}

// Channel is the channel as the node sees it through v (the channel's
// UID uid): its spec, and a status holding the node's slot and permit,
// the latest version and the resolved release only.
func (v View) Channel(uid types.UID) *v1.UpdateChannel {
	ch := &v1.UpdateChannel{
		ObjectMeta: metav1.ObjectMeta{Namespace: v.Namespace, Name: v.Name, UID: uid, CreationTimestamp: v.Created},
		Spec:       v.Spec,
		Status:     v1.UpdateChannelStatus{LatestVersion: v.LatestVersion, Resolved: v.Resolved},
	}
	if v.Slot != nil {
		ch.Status.Updating = []v1.Slot{*v.Slot}
	}
	if v.Permit != nil {
		ch.Status.Staging = []v1.StagePermit{*v.Permit}
	}
	return ch
}
