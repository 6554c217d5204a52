package agent

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// The drain beside the activation. When the slot's Job only activates (its
// release was staged ahead: the Job moves the links and downloads
// nothing), the node asks for its drain as soon as the Job exists, and
// reboots once the controller drained it (its view says Rebooting) and the
// Job's pod has succeeded, whichever comes last. A Job that downloads runs
// first: a drain asked then would keep the node cordoned through the
// download. A Job that fails, turns out another slot's, or goes before it
// swapped ends the slot with the failure, which lifts slipway's cordon
// (plan.Next decides; see docs/agent.md).

// observeBeside fills in what plan.Next needs to know of the drain beside
// the activation: whether the slot's Job only activates (DrainBeside),
// and, where it matters, whether `current` names the target (Swapped) and
// whether the Node shows what the system directory stages (PublishDue).
func (a *Agent) observeBeside(sc *stepCtx, node *corev1.Node, o *plan.Observed) {
	o.DrainBeside = o.Job == plan.JobRunning && sc.s.Drain.Enabled && a.activates(sc) // it matters only then
	afterAsk := o.Phase == plan.PhaseDraining || o.Phase == plan.PhaseRebooting || o.Phase == plan.PhaseWaitingReady
	if afterAsk && o.Job == plan.JobNone {
		if cur := a.currentVersions(); cur != nil {
			o.Swapped = cur.Rootfs == o.Target
		}
	}
	if o.Phase == plan.PhaseDraining && o.Job == plan.JobSucceeded {
		if running := a.readableVersions(); running != nil {
			o.PublishDue = a.publishDue(node, a.versionsNow(*running))
		}
	}
}

// activates reports whether the slot's Job only activates: the Job's own
// command once it is in the cache, else what stepCreateJob builds (the
// slot's version staged ahead, a first attempt).
func (a *Agent) activates(sc *stepCtx) bool {
	if j := a.job(protocol.SlotJobName(sc.ch.UID, sc.slot)); j != nil {
		return protocol.JobArg(j, phaseFlag) == phaseActivate
	}
	return a.activateOnly(sc.slot)
}

// stepPublishSwap publishes what the next boot starts once the activation
// swapped while the controller still drains: the drain's request was
// written before the swap, so it could not say so. A drain done within
// plan.SlowStep of the swap costs no write: the reboot follows, and the node's
// end write publishes what it then runs.
func (a *Agent) stepPublishSwap(ctx context.Context, sc *stepCtx) (time.Duration, error) {
	if wait := plan.SlowStep - time.Since(a.firstSeen(&a.swappedAt)); wait > 0 {
		return wait, nil
	}
	running := a.readableVersions()
	if running == nil {
		return 0, nil
	}
	out := a.versionsNow(*running)
	a.log.Info("the activation swapped while the drain goes on; publishing what the next boot starts", "channel", sc.ch.Name, "version", sc.slot.Version)
	if n := a.ownNode(); n == nil || !out.shownOn(n) {
		if err := a.patchNode(ctx, out.labels, out.annotations); err != nil {
			return 0, err
		}
	}
	return 0, a.writeVersions(ctx)
}
