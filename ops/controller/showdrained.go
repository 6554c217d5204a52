package controller

import (
	"context"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/plan"
)

// A drain done shows its slot Rebooting in the node's view at once. The
// status write that marks the slot Rebooting comes with the next pass; a
// node that waited for it would wait for that pass, and in a busy rollout
// for the passes queued before it (one status write each), on every slot.
// The view is what the node acts on, and what its agent confirms with the
// API server before it reboots; the status is the record a next Lease
// holder reads, and it holds the slot either way.
//
// The view goes out only on the status as this process last knows it for
// certain, under the channel's status lock (every status write holds it,
// and a pass holds it on to the views it sets): the slot must still be
// there, for the same grant, so no write that took it away can come
// between the check and the view. Not when the last status write got no
// answer (it may have taken the slot away unseen), not for a server node
// (its reboot asks the server gate again in the pass: serverstep.go), not
// outside this tenure of the Lease; then the pass does it, as before.
//
// A stop between the view and the status write: the next holder finds
// the slot Draining or Upgrading and the node's request standing, drains
// again (nothing is left to evict; the cordon is already slipway's) and
// marks it Rebooting; the node, rebooted or not, reads the same view.

// showRebooting shows the slot of drain d, done, Rebooting in its node's
// view when it can (see above); else the next pass does.
func (ctl *Controller) showRebooting(ctx context.Context, channel string, d drainRun) {
	if ctx.Err() != nil || ctl.isServerNode(ctx, d.slot.Node) {
		return
	}
	fc := ctl.fleetCacheOf(channel)
	fc.statusMu.Lock()
	defer fc.statusMu.Unlock()
	if ctx.Err() != nil || !ctl.leading(channel) || fc.unsure || fc.follows == nil {
		return // another tenure, a status not known for certain, no pass yet in this one
	}
	ch, err := ctl.channelNow(channel)
	if err != nil || ch.UID != d.uid {
		return
	}
	if i := plan.FindSlot(ch.Status, d.slot.Node); i < 0 || !plan.SameSlot(ch.Status.Updating[i], d.slot) {
		return // taken away, or granted again: the pass decides
	}
	if !ctl.markShown(d) {
		return // the pass marked it already, or it went
	}
	ctl.setViews(ctl.withShownDrains(ch), fc.follows)
}

// markShown records that drain d's slot shows Rebooting in its node's
// view; false when d is no longer a drain done waiting for its pass.
func (ctl *Controller) markShown(d drainRun) bool {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	cur, ok := ctl.drainsDone[d.slot.Node]
	if !ok || cur.uid != d.uid || !plan.SameSlot(cur.slot, d.slot) {
		return false
	}
	cur.shown = true
	ctl.drainsDone[d.slot.Node] = cur
	return true
}

// withShownDrains is ch as its nodes' views show it: the slots of the
// drains done that a view shows already marked Rebooting, though the
// status write that marks them is still to come. ch itself is not changed.
func (ctl *Controller) withShownDrains(ch *v1.UpdateChannel) *v1.UpdateChannel {
	var shown []drainRun
	for _, d := range ctl.drainsDoneIn(ch.UID) {
		if d.shown {
			shown = append(shown, d)
		}
	}
	if len(shown) == 0 {
		return ch
	}
	out := ch.DeepCopy()
	markDrained(&out.Status, shown)
	return out
}
