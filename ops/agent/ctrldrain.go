package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// The controller's drains: a node's agent reports its slot Draining once
// its Job staged the swap; the pass that folds that report starts the
// drain. The controller cordons the node (recording whose cordon it is,
// for which channel, and when the drain began), evicts its pods through
// the Eviction API within what is left of drain.timeout, and the next pass
// over the channel marks the slot Rebooting with what the drain did, in the
// status write it makes anyway (several drains ending together make one
// write, and no drain's write conflicts with the pass's); the node reads
// that in its view and reboots. Status shows a slot Draining only once its
// drain has run for slowStep (plan.HoldBackDraining): a quick drain costs
// no status write of its own. A failed drain uncordons and records the
// failure; a slot taken away mid-drain (every eviction confirms it with the
// API server first) uncordons and records nothing. A drain cut short by the
// controller's end or the Lease's loss is resumed by the next holder, which
// folds the node's report again (the start recorded on the Node, so no
// extra time); what it cordoned for a slot no longer held, it uncordons
// (sweepCordons).

// ownPods are the pods the controller's drains leave in place: its own
// replicas, in its namespace. A drain of the node a replica runs on must not
// evict it: on a one-node cluster its replacement could not schedule on the
// cordoned node, and the node would stay cordoned with nobody to finish the
// slot. Like DaemonSet pods they stay until the reboot ends them; after it
// the replica (or, on a bigger cluster, another one, once the Lease passes)
// finishes the slot and uncordons. The agents' Job pods stay too: a drain
// asked beside an activation (beside.go) runs while the slot's own Job does,
// and evicting its pod would fail the very upgrade the drain is for (the
// node reboots only once that Job succeeded, so none outlives the drain).
func (a *Agent) ownPods() []drain.PodSet {
	return []drain.PodSet{{Namespace: a.opts.Namespace, Labels: map[string]string{protocol.LabelAppName: protocol.ControllerApp}},
		{Namespace: a.opts.Namespace, Labels: map[string]string{protocol.LabelAppName: protocol.LabelAppNameUpgrade}}}
}

// drainRun is one drain under way, or done (how says what it did).
type drainRun struct {
	uid  types.UID
	slot v1.Slot
	how  string
	slow bool // it has run for longer than slowStep: status shows it Draining
}

// startDrains starts, for every slot of ch whose node asked for its drain
// (asked: the fold's, whether or not status shows it yet), the drain
// unless one runs or ran for that slot already.
func (a *Agent) startDrains(ch *v1.UpdateChannel, s plan.Settings, asked []v1.Slot) {
	if !s.Drain.Enabled {
		return
	}
	for _, sl := range asked {
		a.mu.Lock()
		run, busy := a.drains[sl.Node]
		done, ended := a.drainsDone[sl.Node]
		if busy && run.uid == ch.UID && plan.SameSlot(run.slot, sl) || ended && done.uid == ch.UID && plan.SameSlot(done.slot, sl) || a.leaderCtx == nil {
			a.mu.Unlock()
			continue
		}
		ctx := a.leaderCtx
		a.drains[sl.Node] = &drainRun{uid: ch.UID, slot: sl}
		a.mu.Unlock()
		go a.runDrain(ctx, ch.DeepCopy(), s, sl)
	}
}

// slowDrains are the nodes whose drain by this process has run for longer
// than slowStep: their Draining phase shows in status.
func (a *Agent) slowDrains() map[string]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]bool{}
	for n, d := range a.drains {
		if d.slow {
			out[n] = true
		}
	}
	return out
}

// markSlow notes that slot's drain runs for longer than slowStep and wakes
// a pass to show it.
func (a *Agent) markSlow(channel string, slot v1.Slot) {
	a.mu.Lock()
	if d := a.drains[slot.Node]; d != nil && plan.SameSlot(d.slot, slot) {
		d.slow = true
	}
	a.mu.Unlock()
	a.queue.Add(key{roleFleet, channel})
}

// draining is the set of nodes a drain of this process works on.
func (a *Agent) draining() map[string]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]bool{}
	for n := range a.drains {
		out[n] = true
	}
	return out
}

// runDrain drains the node of slot and records the outcome.
func (a *Agent) runDrain(ctx context.Context, ch *v1.UpdateChannel, s plan.Settings, slot v1.Slot) {
	slow := time.AfterFunc(slowStep, func() { a.markSlow(ch.Name, slot) })
	defer func() {
		slow.Stop()
		a.mu.Lock()
		if r := a.drains[slot.Node]; r != nil && plan.SameSlot(r.slot, slot) {
			delete(a.drains, slot.Node)
		}
		a.mu.Unlock()
		a.queue.Add(key{roleFleet, ch.Name})
	}()
	res, began, err := a.drainSlot(ctx, ch, s, slot)
	switch {
	case ctx.Err() != nil:
		return // the next holder resumes it, or uncordons
	case errors.Is(err, errSlotGone):
		a.log.Info("the slot was taken away mid-drain; uncordoning", "node", slot.Node, "channel", ch.Name)
		a.uncordon(ctx, slot.Node)
	case err != nil:
		a.failDrain(ctx, ch, slot, err)
	default:
		a.metrics.drain.Observe(time.Since(began).Seconds())
		a.noteDrained(drainRun{uid: ch.UID, slot: slot, how: fmt.Sprintf("cordoned and drained by the controller in %s (%d pods evicted, %d deleted)",
			time.Since(began).Round(time.Millisecond), len(res.Evicted), len(res.Deleted))})
	}
}

// noteDrained keeps a drain done for the next pass (the deferred queueing
// of runDrain starts it).
func (a *Agent) noteDrained(d drainRun) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.drainsDone == nil {
		a.drainsDone = map[string]drainRun{}
	}
	a.drainsDone[d.slot.Node] = d
}

// drainsDoneIn are the drains done of the channel of UID uid.
func (a *Agent) drainsDoneIn(uid types.UID) []drainRun {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []drainRun
	for _, d := range a.drainsDone {
		if d.uid == uid {
			out = append(out, d)
		}
	}
	return out
}

// markDrained marks the slots of the drains done Rebooting, with what
// each drain did as the slot's message; it returns the drains it is done
// with: marked (or found further on), and those whose slot is gone.
func markDrained(st *v1.UpdateChannelStatus, done []drainRun) (marked, gone []drainRun) {
	for _, d := range done {
		i := plan.FindSlot(*st, d.slot.Node)
		if i < 0 || !plan.SameSlot(st.Updating[i], d.slot) {
			gone = append(gone, d)
			continue
		}
		if sl := &st.Updating[i]; sl.Phase == plan.PhaseDraining || sl.Phase == plan.PhaseUpgrading { // Upgrading: a quick drain's phase never written (plan.HoldBackDraining)
			sl.Phase, sl.Message = plan.PhaseRebooting, d.how
		}
		marked = append(marked, d)
	}
	return marked, gone
}

// draining are the slots of st whose node asked for its drain.
func draining(st v1.UpdateChannelStatus) []v1.Slot {
	var out []v1.Slot
	for _, sl := range st.Updating {
		if sl.Phase == plan.PhaseDraining {
			out = append(out, sl)
		}
	}
	return out
}

// notDrained are the slots of asked whose drain is not among drained: the
// pass that marks a drain's slot Rebooting folded that node's Draining
// report too, and its drain, forgotten once marked, must not start again
// (it would evict the pods the node runs after its reboot, while the slot
// is still held).
func notDrained(asked []v1.Slot, drained []drainRun) []v1.Slot {
	var out []v1.Slot
	for _, sl := range asked {
		if !slices.ContainsFunc(drained, func(d drainRun) bool { return plan.SameSlot(d.slot, sl) }) {
			out = append(out, sl)
		}
	}
	return out
}

// endDrains forgets the drains a pass wrote (marked), and uncordons the
// nodes of those whose slot went meanwhile (gone): taken away mid-drain,
// nobody else lifts that cordon.
func (a *Agent) endDrains(ctx context.Context, marked, gone []drainRun) {
	a.mu.Lock()
	for _, d := range append(marked, gone...) {
		if cur, ok := a.drainsDone[d.slot.Node]; ok && cur.uid == d.uid && plan.SameSlot(cur.slot, d.slot) {
			delete(a.drainsDone, d.slot.Node)
		}
	}
	a.mu.Unlock()
	for _, d := range gone {
		a.log.Info("the slot was taken away as its drain ended; uncordoning", "node", d.slot.Node)
		a.uncordon(ctx, d.slot.Node)
	}
}

// drainSlot cordons and drains slot's node within what is left of its
// drain.timeout; every eviction confirms the slot first.
func (a *Agent) drainSlot(ctx context.Context, ch *v1.UpdateChannel, s plan.Settings, slot v1.Slot) (*drain.Result, time.Time, error) {
	confirm := func(ctx context.Context) error { return a.holdsSlot(ctx, ch, slot) }
	held := make(chan error, 1)
	go func() { held <- confirm(ctx) }() // beside the Node's read: two reads, one round trip's wait
	opts, began, seen, err := a.drainBudget(ctx, slot.Node, drainOptions(s.Drain))
	if err := <-held; err != nil { // nothing is written before the slot is confirmed
		return nil, time.Now(), err
	}
	if err != nil {
		return nil, began, err
	}
	opts.Keep = a.ownPods()
	meta := map[string]string{protocol.AnnotationDrainStarted: began.UTC().Format(time.RFC3339Nano), protocol.AnnotationCordonedFor: a.opts.Namespace + "/" + ch.Name}
	if _, err := drain.CordonSeen(ctx, a.kube, slot.Node, seen, protocol.CordonOwner, meta); err != nil { // seen: the Node just read
		return nil, began, err
	}
	a.log.Info("draining", "node", slot.Node, "channel", ch.Name, "timeout", opts.Timeout)
	res, err := drain.Drain(withConfirm(ctx, confirm), a.drainKube, slot.Node, withLog(opts, a.log))
	if err != nil && !errors.Is(err, errSlotGone) && ctx.Err() == nil && errors.Is(a.holdsSlot(ctx, ch, slot), errSlotGone) {
		err = errSlotGone
	}
	return res, began, err
}

// holdsSlot asks the API server whether ch (the same UID) still holds slot.
func (a *Agent) holdsSlot(ctx context.Context, ch *v1.UpdateChannel, slot v1.Slot) error {
	cur, err := a.ops.UpdateChannels(a.opts.Namespace).Get(ctx, ch.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return errSlotGone
	case err != nil:
		return fmt.Errorf("confirm the slot of node %s in channel %s: %w", slot.Node, ch.Name, err)
	case cur.UID != ch.UID || !plan.Holds(cur.Status, slot.Node, slot):
		return errSlotGone
	}
	return nil
}

// failDrain uncordons slot's node and records the drain's failure.
func (a *Agent) failDrain(ctx context.Context, ch *v1.UpdateChannel, slot v1.Slot, cause error) {
	if !a.uncordon(ctx, slot.Node) {
		return // the next pass tries again
	}
	reason := fmt.Sprintf("drain failed, node uncordoned: %v", cause)
	_, err := a.updateStatus(ctx, ch.Name, func(c *v1.UpdateChannel) error {
		i := plan.FindSlot(c.Status, slot.Node)
		if c.UID != ch.UID || i < 0 || !plan.SameSlot(c.Status.Updating[i], slot) {
			return errSlotGone
		}
		plan.Fail(&c.Status, slot.Node, slot.Version, reason, time.Now())
		return nil
	})
	if err != nil {
		if !errors.Is(err, errSlotGone) {
			a.log.Warn("could not record a drain's failure; the next pass drains again", "node", slot.Node, "err", err)
		}
		return
	}
	a.metrics.failures.WithLabelValues(ch.Name, "drain").Inc()
	a.log.Warn("drain failed", "node", slot.Node, "channel", ch.Name, "err", cause)
	a.recorder.Eventf(ch, corev1.EventTypeWarning, "UpgradeFailed", "node %s (attempt %d): %s", slot.Node, max(slot.Attempt, 1), reason)
}

// uncordon lifts slipway's cordon from node (and the drain's record);
// false when it could not.
func (a *Agent) uncordon(ctx context.Context, node string) bool {
	_, err := drain.Uncordon(ctx, a.kube, node, protocol.CordonOwner, drain.Meta{Annotations: map[string]any{protocol.AnnotationDrainStarted: nil, protocol.AnnotationCordonedFor: nil}})
	if err != nil && !apierrors.IsNotFound(err) {
		a.log.Warn("could not uncordon; retrying at the next pass", "node", node, "err", err)
		return false
	}
	return true
}

// sweepCordons uncordons the nodes this controller cordoned for a slot no
// channel of its namespace holds any more and no drain of its works on
// (plan.LeftCordoned), asked of the API server before it writes.
func (a *Agent) sweepCordons(ctx context.Context) error {
	cordons := a.cordons()
	if len(plan.LeftCordoned(cordons, protocol.CordonOwner, a.opts.Namespace, nil, a.draining())) == 0 {
		return nil
	}
	list, err := a.ops.UpdateChannels(a.opts.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list the channels before uncordoning: %w", err)
	}
	held := map[string]bool{}
	for _, c := range list.Items {
		for _, sl := range c.Status.Updating {
			held[sl.Node] = true
		}
	}
	for _, node := range plan.LeftCordoned(cordons, protocol.CordonOwner, a.opts.Namespace, held, a.draining()) {
		if a.uncordon(ctx, node) {
			a.log.Info("uncordoned a node cordoned for a slot no channel holds any more", "node", node)
		}
	}
	return nil
}

// sweep runs sweepCordons while this controller holds the Lease, again
// after the resync.
func (a *Agent) sweep(ctx context.Context) (time.Duration, error) {
	if !a.elected.Load() {
		return 0, nil
	}
	return a.opts.Resync, a.sweepCordons(ctx)
}
