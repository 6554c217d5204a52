package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/internal/wallclock"
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
// drain has run for plan.SlowStep (plan.HoldBackDraining): a quick drain costs
// no status write of its own. A failed drain uncordons and records the
// failure; a request of the drain that got no answer (a timeout, a dropped
// connection: unread.go), its cordon's included, is no failure: the drain
// resumes after heldRecheck, the slot kept; a slot taken away mid-drain
// (every eviction confirms it with the API server first) uncordons and
// records nothing. A drain cut short by the
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
func (ctl *Controller) ownPods() []drain.PodSet {
	return []drain.PodSet{{Namespace: ctl.opts.Namespace, Labels: map[string]string{protocol.LabelAppName: protocol.ControllerApp}},
		{Namespace: ctl.opts.Namespace, Labels: map[string]string{protocol.LabelAppName: protocol.LabelAppNameUpgrade}}}
}

// drainRun is one drain under way, or done (how says what it did).
type drainRun struct {
	uid  types.UID
	slot v1.Slot
	how  string
	slow bool // it has run for longer than plan.SlowStep: status shows it Draining
}

// startDrains starts, for every slot of ch whose node asked for its drain
// (asked: the fold's, whether or not status shows it yet), the drain
// unless one runs or ran for that slot already.
func (ctl *Controller) startDrains(ch *v1.UpdateChannel, s plan.Settings, asked []v1.Slot) {
	if !s.Drain.Enabled {
		return
	}
	for _, sl := range asked {
		if ctl.serverStepWaits(sl, "drain") {
			continue // held back by another server: asks again after heldRecheck
		}
		ctl.mu.Lock()
		run, busy := ctl.drains[sl.Node]
		done, ended := ctl.drainsDone[sl.Node]
		if busy && run.uid == ch.UID && plan.SameSlot(run.slot, sl) || ended && done.uid == ch.UID && plan.SameSlot(done.slot, sl) || ctl.leaderCtx == nil {
			ctl.mu.Unlock()
			continue
		}
		ctx := ctl.leaderCtx
		ctl.drains[sl.Node] = &drainRun{uid: ch.UID, slot: sl}
		ctl.mu.Unlock()
		go ctl.runDrain(ctx, ch.DeepCopy(), s, sl)
	}
}

// slowDrains are the nodes whose drain by this process has run for longer
// than plan.SlowStep: their Draining phase shows in status.
func (ctl *Controller) slowDrains() map[string]bool {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	out := map[string]bool{}
	for n, d := range ctl.drains {
		if d.slow {
			out[n] = true
		}
	}
	return out
}

// markSlow notes that slot's drain runs for longer than plan.SlowStep and wakes
// a pass to show it.
func (ctl *Controller) markSlow(channel string, slot v1.Slot) {
	ctl.mu.Lock()
	if d := ctl.drains[slot.Node]; d != nil && plan.SameSlot(d.slot, slot) {
		d.slow = true
	}
	ctl.mu.Unlock()
	ctl.queue.Add(key{roleFleet, channel})
}

// draining is the set of nodes a drain of this process works on.
func (ctl *Controller) draining() map[string]bool {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	out := map[string]bool{}
	for n := range ctl.drains {
		out[n] = true
	}
	return out
}

// runDrain drains the node of slot and records the outcome.
func (ctl *Controller) runDrain(ctx context.Context, ch *v1.UpdateChannel, s plan.Settings, slot v1.Slot) {
	slow := time.AfterFunc(plan.SlowStep, func() { ctl.markSlow(ch.Name, slot) })
	defer func() {
		slow.Stop()
		ctl.mu.Lock()
		if r := ctl.drains[slot.Node]; r != nil && plan.SameSlot(r.slot, slot) {
			delete(ctl.drains, slot.Node)
		}
		ctl.mu.Unlock()
		ctl.queue.Add(key{roleFleet, ch.Name})
	}()
	res, began, err := ctl.drainSlot(ctx, ch, s, slot)
	var held *errHeldBack
	var spent *errBudgetSpent
	var unread *errUnread
	switch {
	case ctx.Err() != nil:
		return // the next holder resumes it, or uncordons
	case errors.As(err, &held), errors.As(err, &spent), errors.As(err, &unread):
		ctl.holdStep(ch, slot, "drain", err) // the slot kept, nothing written
		return
	case errors.Is(err, errSlotGone):
		ctl.log.Info("the slot was taken away mid-drain; uncordoning", "node", slot.Node, "channel", ch.Name)
		ctl.uncordon(ctx, slot.Node)
	case err != nil:
		ctl.failDrain(ctx, ch, slot, err)
	default:
		ctl.metrics.drain.Observe(wallclock.Since(began).Seconds())
		ctl.noteDrained(drainRun{uid: ch.UID, slot: slot, how: fmt.Sprintf("cordoned and drained by the controller in %s (%d pods evicted, %d deleted)",
			wallclock.Since(began).Round(time.Millisecond), len(res.Evicted), len(res.Deleted))})
	}
}

// noteDrained keeps a drain done for the next pass (the deferred queueing
// of runDrain starts it).
func (ctl *Controller) noteDrained(d drainRun) {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	if ctl.drainsDone == nil {
		ctl.drainsDone = map[string]drainRun{}
	}
	ctl.drainsDone[d.slot.Node] = d
}

// drainsDoneIn are the drains done of the channel of UID uid.
func (ctl *Controller) drainsDoneIn(uid types.UID) []drainRun {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	var out []drainRun
	for _, d := range ctl.drainsDone {
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
func (ctl *Controller) endDrains(ctx context.Context, marked, gone []drainRun) {
	ctl.mu.Lock()
	for _, d := range append(marked, gone...) {
		if cur, ok := ctl.drainsDone[d.slot.Node]; ok && cur.uid == d.uid && plan.SameSlot(cur.slot, d.slot) {
			delete(ctl.drainsDone, d.slot.Node)
		}
	}
	ctl.mu.Unlock()
	for _, d := range gone {
		ctl.log.Info("the slot was taken away as its drain ended; uncordoning", "node", d.slot.Node)
		ctl.uncordon(ctx, d.slot.Node)
	}
}

// drainSlot cordons and drains slot's node within what is left of its
// drain.timeout; every eviction confirms the slot first.
func (ctl *Controller) drainSlot(ctx context.Context, ch *v1.UpdateChannel, s plan.Settings, slot v1.Slot) (*drain.Result, time.Time, error) {
	confirm := func(ctx context.Context) error { return ctl.holdsSlot(ctx, ch, slot) }
	held := make(chan error, 1)
	go func() { held <- confirm(ctx) }() // beside the Node's read: two reads, one round trip's wait
	opts, began, seen, err := ctl.drainBudget(ctx, slot.Node, drainOptions(s.Drain))
	if err := <-held; err != nil { // nothing is written before the slot is confirmed
		return nil, wallclock.Now(), unreadOr(err)
	}
	if err != nil {
		return nil, began, unreadOr(err)
	}
	if plan.Server(plan.Node{Labels: seen.Labels}) { // seen: read live just now
		if err := ctl.serverMayGoDown(ctx, slot.Node); err != nil {
			return nil, began, err // no cordon while another server is down (serverstep.go)
		}
	}
	if drain.CordonedBy(seen.Annotations) != protocol.CordonOwner { // a cordon begun stays: its drain resumes
		if err := ctl.mayCordon(s, slot); err != nil {
			return nil, began, err // the channel's other nodes down spend its budget (availability.go)
		}
	}
	ctl.releaseServerStep(slot)
	opts.Keep = ctl.ownPods()
	meta := map[string]string{protocol.AnnotationDrainStarted: began.UTC().Format(time.RFC3339Nano), protocol.AnnotationCordonedFor: ctl.opts.Namespace + "/" + ch.Name}
	if _, err := drain.CordonSeen(ctx, ctl.kube, slot.Node, seen, protocol.CordonOwner, meta); err != nil { // seen: the Node just read
		return nil, began, unreadOr(err) // no answer: it may have landed; the next attempt reads the Node and resumes a cordon it finds
	}
	ctl.log.Info("draining", "node", slot.Node, "channel", ch.Name, "timeout", opts.Timeout)
	res, err := drain.Drain(withConfirm(ctx, confirm), ctl.drainKube, slot.Node, withLog(opts, ctl.log))
	if err != nil && !errors.Is(err, errSlotGone) && ctx.Err() == nil && errors.Is(ctl.holdsSlot(ctx, ch, slot), errSlotGone) {
		err = errSlotGone
	}
	return res, began, unreadOr(err) // no answer mid-drain: the node stays cordoned, the slot kept; the next attempt resumes it
}

// holdsSlot asks the API server whether ch (the same UID) still holds slot.
func (ctl *Controller) holdsSlot(ctx context.Context, ch *v1.UpdateChannel, slot v1.Slot) error {
	cur, err := ctl.ops.UpdateChannels(ctl.opts.Namespace).Get(ctx, ch.Name, metav1.GetOptions{})
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
func (ctl *Controller) failDrain(ctx context.Context, ch *v1.UpdateChannel, slot v1.Slot, cause error) {
	if !ctl.uncordon(ctx, slot.Node) {
		return // the next pass tries again
	}
	reason := fmt.Sprintf("drain failed, node uncordoned: %v", cause)
	_, err := ctl.updateStatus(ctx, ch.Name, func(c *v1.UpdateChannel) error {
		i := plan.FindSlot(c.Status, slot.Node)
		if c.UID != ch.UID || i < 0 || !plan.SameSlot(c.Status.Updating[i], slot) {
			return errSlotGone
		}
		plan.Fail(&c.Status, slot.Node, slot.Version, reason, wallclock.Now())
		return nil
	})
	if err != nil {
		if !errors.Is(err, errSlotGone) {
			ctl.log.Warn("could not record a drain's failure; the next pass drains again", "node", slot.Node, "err", err)
		}
		return
	}
	ctl.metrics.failures.WithLabelValues(ch.Name, "drain").Inc()
	ctl.log.Warn("drain failed", "node", slot.Node, "channel", ch.Name, "err", cause)
	ctl.recorder.Eventf(ch, corev1.EventTypeWarning, "UpgradeFailed", "node %s (attempt %d): %s", slot.Node, max(slot.Attempt, 1), reason)
}

// uncordon lifts slipway's cordon from node (and the drain's record);
// false when it could not.
func (ctl *Controller) uncordon(ctx context.Context, node string) bool {
	_, err := drain.Uncordon(ctx, ctl.kube, node, protocol.CordonOwner, drain.Meta{Annotations: map[string]any{protocol.AnnotationDrainStarted: nil, protocol.AnnotationCordonedFor: nil}})
	if err != nil && !apierrors.IsNotFound(err) {
		ctl.log.Warn("could not uncordon; retrying at the next pass", "node", node, "err", err)
		return false
	}
	return true
}

// sweepCordons uncordons the nodes this controller cordoned for a slot no
// channel of its namespace holds any more and no drain of its works on
// (plan.LeftCordoned), asked of the API server before it writes.
func (ctl *Controller) sweepCordons(ctx context.Context) error {
	cordons := ctl.cordons()
	if len(plan.LeftCordoned(cordons, protocol.CordonOwner, ctl.opts.Namespace, nil, ctl.draining())) == 0 {
		return nil
	}
	list, err := ctl.ops.UpdateChannels(ctl.opts.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list the channels before uncordoning: %w", err)
	}
	held := map[string]bool{}
	for _, c := range list.Items {
		for _, sl := range c.Status.Updating {
			held[sl.Node] = true
		}
	}
	for _, node := range plan.LeftCordoned(cordons, protocol.CordonOwner, ctl.opts.Namespace, held, ctl.draining()) {
		if ctl.uncordon(ctx, node) {
			ctl.log.Info("uncordoned a node cordoned for a slot no channel holds any more", "node", node)
		}
	}
	return nil
}

// sweep runs sweepCordons while this controller holds the Lease, again
// after the resync.
func (ctl *Controller) sweep(ctx context.Context) (time.Duration, error) {
	if !ctl.elected.Load() {
		return 0, nil
	}
	return ctl.opts.Resync, ctl.sweepCordons(ctx)
}

// lastDrainPass is the least time a resumed drain gets (a controller taking
// it over late, or after its timeout): one more pass, then the policy.
const lastDrainPass = time.Second

// drainBudget returns the drain options of node with the timeout left,
// counted from when this slot's drain began (the annotation written with
// slipway's cordon, read from the API server), and that start (now for a
// new drain), and the Node as read.
func (ctl *Controller) drainBudget(ctx context.Context, node string, o drain.Options) (drain.Options, time.Time, *corev1.Node, error) {
	n, err := ctl.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return o, time.Time{}, nil, fmt.Errorf("read node %s before its drain: %w", node, err)
	}
	var began time.Time
	recorded := false
	// trust: ops.node.drain-record
	if drain.CordonedBy(n.Annotations) == protocol.CordonOwner {
		began, err = time.Parse(time.RFC3339Nano, n.Annotations[protocol.AnnotationDrainStarted])
		recorded = err == nil
	}
	now := wallclock.Now() // began is the Node's record, written by this clock or another's
	left, expired := plan.DrainBudget(began, recorded, now, o.Timeout)
	if !recorded {
		began = now
	}
	if expired || recorded && left < lastDrainPass {
		left = lastDrainPass // at least one real pass before the policy applies
	}
	if left != o.Timeout {
		ctl.log.Info("drain resumed", "node", node, "began", began, "timeout", o.Timeout, "left", left)
	}
	o.Timeout = left
	return o, began, n, nil
}

// drainOptions is the channel's drain policy as ops/drain takes it.
func drainOptions(d plan.Drain) drain.Options {
	return drain.Options{Timeout: d.Timeout, GracePeriodSeconds: d.GracePeriodSeconds, DeleteEmptyDirData: d.DeleteEmptyDirData,
		IgnoreDaemonSets: d.IgnoreDaemonSets, Force: d.Force, PodSelector: d.PodSelector}
}

// withLog is the drain policy o logging to log.
func withLog(o drain.Options, log *slog.Logger) drain.Options {
	o.Log = log
	return o
}
