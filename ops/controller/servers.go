package controller

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/plan"
)

// One server down at a time across every channel. Servers-first and the
// one-server limit of plan.Assign hold within a channel; with two channels
// (a canary beside the default) each would let one of its servers go down,
// two etcd members at once. The controller decides every channel, one pass
// at a time (one worker), and grants no server slot while a server node
// holds a slot in another channel, as read from the API server at that
// pass (not from its cache, which may not show its own last write yet).
// Its writes are fenced by its Lease's tenure, so a stalled former holder
// grants nothing beside it. No node takes part: the agent holds no Lease
// but its heartbeat.

// serverBusyElsewhere tells the fleet view of channel name whether a
// server node (its labels, from the controller's Node metadata) holds a
// slot in another channel; true when that cannot be told.
func (ctl *Controller) serverBusyElsewhere(ctx context.Context, name string) bool {
	list, err := ctl.ops.UpdateChannels(ctl.opts.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return true // cannot tell: no server starts
	}
	for _, ch := range list.Items {
		if ch.Name == name {
			continue
		}
		for _, sl := range ch.Status.Updating {
			if ctl.isServerNode(ctx, sl.Node) {
				return true
			}
		}
	}
	return false
}

// serverWaits tells whether a server node of the channel holds a slot or
// is behind target: only then can another channel's server slot change
// what a pass grants (plan.AssignBeside), and only then is it asked for.
func serverWaits(st v1.UpdateChannelStatus, mine []plan.Node, target string) bool {
	for _, n := range mine {
		if plan.Server(n) && (plan.FindSlot(st, n.Name) >= 0 || n.Version != "" && n.Version != target) {
			return true
		}
	}
	return false
}

// isServerNode tells whether node is a control-plane or etcd node, from
// the controller's Node metadata (a GET when its cache lacks it).
func (ctl *Controller) isServerNode(ctx context.Context, node string) bool {
	if ctl.nodeMeta != nil {
		if o, ok, _ := ctl.nodeMeta.GetByKey(node); ok {
			if m, ok := o.(*metav1.PartialObjectMetadata); ok {
				return plan.Server(plan.Node{Labels: m.Labels})
			}
		}
	}
	n, err := ctl.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	return err == nil && plan.Server(plan.Node{Labels: n.Labels})
}
