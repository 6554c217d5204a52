package plan

import (
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/protocol"
)

// The views the controller writes (protocol.View): what each node gets of
// a channel, and which differences need no write.

// ViewOf is node's view of ch, and false when ch does not concern node:
// node neither follows ch nor holds a slot or a staging permit in it.
func ViewOf(ch *v1.UpdateChannel, node string, follows bool) (protocol.View, bool) {
	v := protocol.View{Namespace: ch.Namespace, Name: ch.Name, Created: ch.CreationTimestamp, Spec: ch.Spec}
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

// SlotLive reports whether view v still gives its node a slot to act on:
// it shows a slot, and the node's report r does not say that slot ended.
// A slot the node ended (its success, failure or deferral) may stay in
// its view until the view changes for another reason (EndedOnly), so
// every reader of the view that asks "does this node hold a slot" asks
// this, not whether the view shows one.
func SlotLive(v protocol.View, r protocol.Report) bool {
	if v.Slot == nil {
		return false
	}
	_, outcome := Reported(r, *v.Slot)
	return outcome == ""
}

// ViewGives reports whether the view val still gives its node slot to act
// on: it shows that very grant (SameSlot) and the node's report r does not
// say it ended. An unreadable view gives nothing. A slot the controller
// took away stays remembered until its node's view no longer gives it.
func ViewGives(val string, r protocol.Report, slot v1.Slot) bool {
	v, err := protocol.ParseView(val)
	if err != nil || v.Slot == nil || !SameSlot(*v.Slot, slot) {
		return false
	}
	return SlotLive(v, r)
}

// EndedOnly reports whether the view cur differs from want only by what
// the node's report r says is over: a slot it reported ended (its success,
// failure or deferral) and a staging permit it gave back. Such a view stays
// until the node's view changes for another reason: the node acts on its
// report, not on a slot it ended or a permit it gave back, and the
// controller saves a write per node and slot, and per node and permit.
func EndedOnly(cur, want string, r protocol.Report) bool {
	c, err := protocol.ParseView(cur)
	if err != nil {
		return false
	}
	w, err := protocol.ParseView(want)
	if err != nil {
		return false
	}
	over := false
	if c.Slot != nil && w.Slot == nil {
		if _, outcome := Reported(r, *c.Slot); outcome != "" {
			c.Slot, over = nil, true
		}
	}
	if c.Permit != nil && w.Permit == nil && r.PermitDone != nil && r.PermitDone.Unix() == c.Permit.Since.Unix() {
		c.Permit, over = nil, true
	}
	return over && c.String() == w.String()
}
