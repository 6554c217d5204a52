package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
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

// serverGate is what the other channels and the server nodes say of a
// pass's server slots: busy, a server node holds a slot in another
// channel; heldBy and why, a server node that holds no slot in any
// channel is down (plan.ServerHoldingBack). Either counts as a server
// slot taken. The servers considered are those any valid channel of this
// namespace selects, read from the API server. When it cannot be told,
// busy is true: no server starts.
type serverGate struct {
	busy        bool
	heldBy, why string
}

// serverGateFor reads the serverGate for channel name; snap is the
// controller's Node metadata at this pass (the servers' labels).
func (ctl *Controller) serverGateFor(ctx context.Context, name string, snap map[string]*metav1.ObjectMeta) serverGate {
	list, err := ctl.ops.UpdateChannels(ctl.opts.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return serverGate{busy: true} // cannot tell: no server starts
	}
	var g serverGate
	holding := map[string]bool{}
	chans := make([]*v1.UpdateChannel, 0, len(list.Items))
	for i := range list.Items {
		ch := &list.Items[i]
		chans = append(chans, ch)
		for _, sl := range ch.Status.Updating {
			holding[sl.Node] = true
			if ch.Name != name && ctl.isServerNode(ctx, sl.Node) {
				g.busy = true
			}
		}
	}
	if ctl.revokedServerShown(func(n string) bool { return ctl.isServerNode(ctx, n) }) {
		g.busy = true // a server's slot taken away may still be in its view
	}
	refs := plan.Refs(chans)
	var states []plan.ServerState
	for _, m := range snap {
		if holding[m.Name] || !plan.Server(plan.Node{Labels: m.Labels}) || !selectedByAny(refs, m.Labels) {
			continue
		}
		n, err := ctl.kube.CoreV1().Nodes().Get(ctx, m.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue // deleted: no longer a member
		case err != nil:
			return serverGate{busy: true}
		}
		states = append(states, plan.ServerState{Name: n.Name, ReadyStatus: readyStatus(n),
			CordonedBySlipway: n.Spec.Unschedulable && drain.CordonedBy(n.Annotations) == protocol.CordonOwner})
	}
	g.heldBy, g.why = plan.ServerHoldingBack(states)
	return g
}

// taken tells whether the gate counts as a server slot taken.
func (g serverGate) taken() bool { return g.busy || g.heldBy != "" }

// selectedByAny tells whether a channel of refs selects a node with labels l.
func selectedByAny(refs []plan.ChannelRef, l map[string]string) bool {
	for _, r := range refs {
		if r.Selector.Matches(labels.Set(l)) {
			return true
		}
	}
	return false
}

// readyStatus is the status of n's Ready condition ("" when it has none).
func readyStatus(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return string(c.Status)
		}
	}
	return ""
}

// heldBackEvent records, once per server and reason, an Event on ch naming
// the server that holds the channel's servers back.
func (ctl *Controller) heldBackEvent(ch *v1.UpdateChannel, fc *fleetCache, g serverGate) {
	key := g.heldBy + "/" + g.why
	if key == fc.heldBack {
		return
	}
	fc.heldBack = key
	if g.heldBy == "" {
		return
	}
	ctl.log.Warn("no server slot while a server node is down", "channel", ch.Name, "server", g.heldBy, "why", g.why)
	ctl.recorder.Eventf(ch, corev1.EventTypeWarning, "ServerHeldBack",
		"no server node of this channel starts while server node %s is down without a slot (%s): two servers down at once could cost the etcd quorum; bring it back (or delete its Node if it is gone for good)",
		g.heldBy, g.why)
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
// the controller's Node metadata (a GET when its cache lacks it). A node
// that cannot be told (the GET got no answer, or a refusal) counts as a
// server, as the gates count what they cannot tell: a server's reboot
// permitted as a worker's would skip the server gate.
func (ctl *Controller) isServerNode(ctx context.Context, node string) bool {
	if ctl.nodes != nil {
		if o, ok, _ := ctl.nodes.GetByKey(node); ok {
			if m, ok := nodeMeta(o); ok {
				return plan.Server(plan.Node{Labels: m.Labels})
			}
		}
	}
	n, err := ctl.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	return serverOrUnknown(n, err)
}

// serverOrUnknown tells whether n, as a GET of it returned (err), is a
// server node or cannot be told from one; a Node not found is none.
func serverOrUnknown(n *corev1.Node, err error) bool {
	switch {
	case apierrors.IsNotFound(err):
		return false // deleted: no longer a member
	case err != nil:
		return true
	}
	return plan.Server(plan.Node{Labels: n.Labels})
}
