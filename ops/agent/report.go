package agent

import (
	"context"
	"fmt"
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/wallclock"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// The node's reports (protocol.Report): its slot's phase and outcome and the
// staging permit it gave back, written in its own NodeUpdate's status once
// it announced there (nodeupdate.go), else on its own Node
// (protocol.AnnotationSlotReport), instead of the channel's status, which
// only the controller writes. This process is their only writer, so what it
// last wrote is the truth; at start it reads them from where it reports.

// reportsNow returns the node's reports: this process's last write, or its Node's.
func (a *Agent) reportsNow() protocol.Reports {
	a.mu.Lock()
	r := a.reported
	a.mu.Unlock()
	if r != nil {
		return r
	}
	if u := a.ownObject(); a.reportsInObject() && u != nil {
		// trust: ops.agent.own-nodeupdate
		return protocol.ReportsOfStatus(u.Status)
	}
	n := a.ownNode()
	if n == nil {
		return protocol.Reports{}
	}
	// trust: ops.agent.own-slot-report
	r, err := protocol.ParseReports(n.Annotations[protocol.AnnotationSlotReport])
	if err != nil {
		a.log.Warn("ignoring the slot report on this node; the next report replaces it", "err", err)
	}
	return r
}

// reportOf is the node's report for the channel of UID uid.
func (a *Agent) reportOf(uid types.UID) protocol.Report { return a.reportsNow()[uid] }

// reportWith edits the node's report for ch and writes the reports where
// it reports (those of channels gone are dropped), with the versions pub
// (unless nil) and the annotations extra in the same write, or, reporting
// in its NodeUpdate, the Node's part of them just before. written (unless
// nil) runs once the write landed, before the reporting lock is given
// back: a write waiting on the lock then sees what it noted.
func (a *Agent) reportWith(ctx context.Context, ch *v1.UpdateChannel, edit func(*protocol.Report), pub *versionsOut, extra map[string]any, written func()) error {
	a.reporting.Lock()
	defer a.reporting.Unlock()
	if err := a.reportLocked(ctx, ch, edit, pub, extra); err != nil {
		return err
	}
	if written != nil {
		written()
	}
	return nil
}

// reportLocked is reportWith's write, with the reporting lock held.
func (a *Agent) reportLocked(ctx context.Context, ch *v1.UpdateChannel, edit func(*protocol.Report), pub *versionsOut, extra map[string]any) error {
	next, annotations := a.nextReports(ch, edit)
	var labels, onNode, fields map[string]any
	if pub != nil {
		labels, onNode, fields = pub.labels, maps.Clone(pub.annotations), maps.Clone(pub.status)
	}
	if a.reportsInObject() {
		// The Node's labels and annotations first (those it does not show
		// yet), then the report that may end the slot (as one write did on
		// the Node).
		node, status := splitStatus(extra)
		if onNode == nil {
			onNode = map[string]any{}
		}
		maps.Copy(onNode, node)
		if fields == nil {
			fields = map[string]any{}
		}
		maps.Copy(fields, status)
		if n := a.ownNode(); n == nil || !sameMeta(n.Labels, labels) || !sameMeta(n.Annotations, onNode) {
			if err := a.patchNode(ctx, labels, onNode); err != nil {
				return fmt.Errorf("report on node %s for channel %s: %w", a.opts.NodeName, ch.Name, err)
			}
		}
		if err := a.writeStatus(ctx, next, fields); err != nil {
			return fmt.Errorf("for channel %s: %w", ch.Name, err)
		}
		a.noteReported(next)
		return nil
	}
	if onNode == nil {
		onNode = map[string]any{}
	}
	maps.Copy(onNode, annotations)
	maps.Copy(onNode, extra)
	if err := a.patchNode(ctx, labels, onNode); err != nil {
		return fmt.Errorf("report on node %s for channel %s: %w", a.opts.NodeName, ch.Name, err)
	}
	a.noteReported(next)
	return nil
}

// nextReports is the node's reports with edit applied to ch's (those of
// channels gone dropped), and the annotation that writes them.
func (a *Agent) nextReports(ch *v1.UpdateChannel, edit func(*protocol.Report)) (protocol.Reports, map[string]any) {
	old := a.reportsNow()
	next := protocol.Reports{}
	if list, err := a.listChannels(); err == nil {
		for _, c := range list {
			if r, ok := old[c.UID]; ok {
				next[c.UID] = r
			}
		}
	}
	r := next[ch.UID]
	edit(&r)
	next[ch.UID] = r
	return next, map[string]any{protocol.AnnotationSlotReport: next.String()}
}

// noteReported remembers the reports as written on the Node.
func (a *Agent) noteReported(next protocol.Reports) {
	a.mu.Lock()
	a.reported = next
	a.mu.Unlock()
}

// endSlot reports slot of ch ended with outcome (and reason) in the same
// write that uncordons the node if slipway cordoned it and labels it with
// versions v (unless nil): the controller, freeing the slot, sees the
// node's new versions and no cordon of ours in the same change.
func (a *Agent) endSlot(ctx context.Context, ch *v1.UpdateChannel, slot v1.Slot, v *Versions, outcome, reason string) error {
	a.reporting.Lock()
	defer a.reporting.Unlock()
	next, report := a.nextReports(ch, slotReport(slot, slot.Phase, slot.Job, outcome, reason))
	if a.reportsInObject() {
		// Uncordoned and labelled first, then the report that frees the
		// slot with the versions the node runs (its NodeUpdate's status).
		versions, err := a.uncordonAndPublish(ctx, v, nil)
		if err != nil {
			return fmt.Errorf("report on node %s for channel %s: %w", a.opts.NodeName, ch.Name, err)
		}
		if err := a.writeStatus(ctx, next, versions); err != nil {
			return fmt.Errorf("for channel %s: %w", ch.Name, err)
		}
		a.noteReported(next)
		return nil
	}
	if _, err := a.uncordonAndPublish(ctx, v, report); err != nil {
		return fmt.Errorf("report on node %s for channel %s: %w", a.opts.NodeName, ch.Name, err)
	}
	a.noteReported(next)
	return nil
}

// reportSlot reports slot of ch at phase with job, or ended with outcome and reason.
func (a *Agent) reportSlot(ctx context.Context, ch *v1.UpdateChannel, slot v1.Slot, phase, job, outcome, reason string) error {
	return a.reportWith(ctx, ch, slotReport(slot, phase, job, outcome, reason), nil, nil, nil)
}

// reportSlotWith reports slot of ch at phase with job, and publishes the
// versions pub (unless nil) and the annotations extra in the same write.
// The phase is noted as written (noteWrote) before the reporting lock is
// given back: a versions write that waited on it (republish) sees it.
func (a *Agent) reportSlotWith(ctx context.Context, ch *v1.UpdateChannel, slot v1.Slot, phase, job string, pub *versionsOut, extra map[string]any) error {
	return a.reportWith(ctx, ch, slotReport(slot, phase, job, "", ""), pub, extra, func() { a.noteWrote(ch.UID, slot, phase, job) })
}

// slotReport edits a report into slot's at phase with job (ended with
// outcome and reason, when given), keeping the permit given back.
func slotReport(slot v1.Slot, phase, job, outcome, reason string) func(*protocol.Report) {
	return func(r *protocol.Report) {
		permit := r.PermitDone
		*r = protocol.Report{Since: slot.Since, Attempt: slot.Attempt, Version: slot.Version, Phase: phase, Job: job,
			Outcome: outcome, Reason: reason, PermitDone: permit}
		if outcome != "" {
			r.At = metav1.NewTime(wallclock.Now())
		}
	}
}

// reportedEnded tells whether this node reported slot of ch ended (the
// controller has not folded it yet): the slot is no longer the node's to act on.
func (a *Agent) reportedEnded(ch *v1.UpdateChannel, slot v1.Slot) bool {
	_, outcome := plan.Reported(a.reportOf(ch.UID), slot)
	return outcome != ""
}
