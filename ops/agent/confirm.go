package agent

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// confirmSlot asks the API server (not the informer) whether this node
// still holds slot in channel ch (the same channel: its UID; the same
// grant: plan.Holds), as the controller's view of ch on this node's Node
// says, and has not reported it ended, and returns errSlotGone when it
// does not. Nothing cordons, drains, evicts or reboots on a slot it has
// not confirmed.
func (a *Agent) confirmSlot(ctx context.Context, ch *v1.UpdateChannel, slot v1.Slot) error {
	views, err := a.viewsFromServer(ctx)
	if err != nil {
		return fmt.Errorf("confirm the slot of node %s in channel %s: %w", a.opts.NodeName, ch.Name, err)
	}
	v, ok := views[ch.UID]
	switch {
	case !ok || !plan.Holds(v.Channel(ch.UID).Status, a.opts.NodeName, slot):
		return errSlotGone
	case a.reportedEnded(ch, slot):
		return errSlotGone // this node ended it; the controller has not freed it yet
	}
	return nil
}

// holdsAnySlot asks the API server whether a channel holds a slot for this
// node (the channel views on its Node, not the cache) that the node has not
// reported ended (plan.SlotLive): a slot it ended stays in its view until
// the view changes for another reason, and must not hold back the undoing
// of its swap.
func (a *Agent) holdsAnySlot(ctx context.Context) (bool, error) {
	views, err := a.viewsFromServer(ctx)
	if err != nil {
		return false, fmt.Errorf("read the node's channel views before a rollback: %w", err)
	}
	reports := a.reportsNow()
	for uid, v := range views {
		if plan.SlotLive(v, reports[uid]) {
			return true, nil
		}
	}
	return false, nil
}

// viewsFromServer reads this node's channel views from the API server (not
// the informer): its NodeUpdate's when the controller writes them there,
// else its Node's.
func (a *Agent) viewsFromServer(ctx context.Context) (map[types.UID]protocol.View, error) {
	if views, ok, err := a.objectViewsFromServer(ctx); err != nil || ok {
		return views, err
	}
	n, err := a.kube.CoreV1().Nodes().Get(ctx, a.opts.NodeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read node %s: %w", a.opts.NodeName, err)
	}
	return a.viewsOf(n.Annotations), nil
}
