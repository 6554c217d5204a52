package controller

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// A slot taken away leaves its node's view before its capacity is granted
// again. The controller takes a slot away in a status write (a stale slot
// failed, an abandoned one released, every slot of a channel whose spec
// turned invalid); the node learns it from its view, written after that
// status write and apart from it. A node that confirms a retried reboot
// against its view in between would reboot beside the node the freed
// capacity went to. So a slot taken away is remembered (revoked) until
// the node's view, as this controller last wrote or saw it, no longer
// gives it that slot (or the node reported the slot ended, so it no longer
// acts on it), and no slot of the channel is granted meanwhile; a server
// whose revoked slot is still shown counts as a server slot taken in every
// channel. The node's view is written in the urgent lane of the view
// queue, and its write queues the channel's next pass.

// revocations are the slots taken away from nodes of one channel whose
// views may still show them, by node.
type revocations struct {
	mu    sync.Mutex
	slots map[string]v1.Slot
}

// add remembers slots taken away.
func (r *revocations) add(slots []v1.Slot) {
	if len(slots) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.slots == nil {
		r.slots = map[string]v1.Slot{}
	}
	for _, s := range slots {
		r.slots[s.Node] = s
	}
}

// pending drops the revocations whose node no longer sees its slot
// (shown) and returns the nodes of those left, sorted.
func (r *revocations) pending(shown func(v1.Slot) bool) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for node, s := range r.slots {
		if shown(s) {
			out = append(out, node)
		} else {
			delete(r.slots, node)
		}
	}
	slices.Sort(out)
	return out
}

// has tells whether node's slot was taken away and may still be shown.
func (r *revocations) has(node string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.slots[node]
	return ok
}

// nodes are the nodes whose slot was taken away and may still be shown.
func (r *revocations) nodes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.slots))
	for n := range r.slots {
		out = append(out, n)
	}
	return out
}

// revokedShown tells whether node's view of the channel of UID uid, as
// this controller last wrote or saw it, still gives it slot to act on.
func (ctl *Controller) revokedShown(uid types.UID, slot v1.Slot) bool {
	have := ctl.viewsSeen(slot.Node)
	val, ok := have[protocol.ViewKey(uid)]
	if !ok {
		return false // deleted, or no view of the channel: nothing to confirm against
	}
	r, _ := protocol.ParseReports(have[protocol.AnnotationSlotReport])
	return plan.ViewGives(val, r[uid], slot)
}

// fenced are the nodes of channel ch whose slot was taken away and whose
// view still shows it: no slot of ch is granted while there is one.
func (ctl *Controller) fenced(fc *fleetCache, uid types.UID) []string {
	return fc.revoked.pending(func(s v1.Slot) bool { return ctl.revokedShown(uid, s) })
}

// revokedServerShown tells whether a server node's slot was taken away in
// some channel and its view may still show it.
func (ctl *Controller) revokedServerShown(isServer func(string) bool) bool {
	ctl.mu.Lock()
	caches := make([]*fleetCache, 0, len(ctl.fleet))
	for _, fc := range ctl.fleet {
		caches = append(caches, fc)
	}
	ctl.mu.Unlock()
	for _, fc := range caches {
		for _, n := range fc.revoked.nodes() {
			if isServer(n) {
				return true
			}
		}
	}
	return false
}

// revokedViewWritten queues the pass of every channel that waits for
// node's view to drop a slot taken away (its view was just written).
func (ctl *Controller) revokedViewWritten(node string) {
	ctl.mu.Lock()
	var names []string
	for name, fc := range ctl.fleet {
		if fc.revoked.has(node) {
			names = append(names, name)
		}
	}
	ctl.mu.Unlock()
	for _, name := range names {
		ctl.queue.Add(key{roleFleet, name})
	}
}
