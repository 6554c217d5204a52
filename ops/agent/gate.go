package agent

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/protocol"
)

// deferToWindow gives slot back when the maintenance window leaves no room
// for the drain and the reboot (plan.MayStart, plan.MayReboot): the node
// is uncordoned, the slot released without a failure (failures already
// recorded stay), and the swap rolled back; the node starts again in the
// window's next opening.
func (a *Agent) deferToWindow(ctx context.Context, ch *v1.UpdateChannel, slot v1.Slot, reason string) error {
	if err := a.endSlot(ctx, ch, slot, a.readableVersions(), protocol.OutcomeReleased, reason); err != nil {
		return err
	}
	a.log.Info("slot given back: the window leaves no room", "channel", ch.Name, "why", reason)
	a.recorder.Eventf(ch, corev1.EventTypeNormal, "WaitingForWindow", "node %s gave its slot back, uncordoned, not rebooted: %s", a.opts.NodeName, reason)
	return a.undoSwap(ctx, ch)
}
