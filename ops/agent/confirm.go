package agent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
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
// node (the channel views on its Node, not the cache).
func (a *Agent) holdsAnySlot(ctx context.Context) (bool, error) {
	views, err := a.viewsFromServer(ctx)
	if err != nil {
		return false, fmt.Errorf("read the node's channel views before a rollback: %w", err)
	}
	for _, v := range views {
		if v.Slot != nil {
			return true, nil
		}
	}
	return false, nil
}

// viewsFromServer reads the channel views on this agent's Node from the
// API server (not the informer).
func (a *Agent) viewsFromServer(ctx context.Context) (map[types.UID]protocol.View, error) {
	n, err := a.kube.CoreV1().Nodes().Get(ctx, a.opts.NodeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read node %s: %w", a.opts.NodeName, err)
	}
	return a.viewsOf(n.Annotations), nil
}

// lastDrainPass is the least time a resumed drain gets (a controller taking
// it over late, or after its timeout): one more pass, then the policy.
const lastDrainPass = time.Second

// drainBudget returns the drain options of node with the timeout left,
// counted from when this slot's drain began (the annotation written with
// slipway's cordon, read from the API server), and that start (now for a
// new drain), and the Node as read.
func (a *Agent) drainBudget(ctx context.Context, node string, o drain.Options) (drain.Options, time.Time, *corev1.Node, error) {
	n, err := a.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return o, time.Time{}, nil, fmt.Errorf("read node %s before its drain: %w", node, err)
	}
	var began time.Time
	recorded := false
	if drain.CordonedBy(n.Annotations) == protocol.CordonOwner {
		began, err = time.Parse(time.RFC3339Nano, n.Annotations[protocol.AnnotationDrainStarted])
		recorded = err == nil
	}
	now := time.Now()
	left, expired := plan.DrainBudget(began, recorded, now, o.Timeout)
	if !recorded {
		began = now
	}
	if expired || recorded && left < lastDrainPass {
		left = lastDrainPass // at least one real pass before the policy applies
	}
	if left != o.Timeout {
		a.log.Info("drain resumed", "node", node, "began", began, "timeout", o.Timeout, "left", left)
	}
	o.Timeout = left
	return o, began, n, nil
}
