package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// The server gate asked again at the steps that take a server down. The
// gate of servers.go is read when a server's slot is granted; the drain
// follows seconds (the Job) to minutes (a download) later, and the reboot
// after the drain. Another server going NotReady in between would leave
// two etcd members down. So the drain asks the API server right before
// its cordon, and the pass that would mark the slot Rebooting asks right
// before that write (plan.ServerMayGoDown): another server down or
// holding a slot holds the step back, the slot kept, the cordon not
// begun (or, after the drain, the reboot not permitted), until it is back.
//
// Where the process may stop: killed after the check and before the
// cordon, it wrote nothing; the next Lease holder folds the node's drain
// request again and checks again before its own cordon. Killed after the
// cordon, the next holder resumes the drain and checks again before the
// reboot permit. The reads are live (a list of the channels, the server
// nodes by their role labels), never the informers' caches, which may be
// a write behind. What no read can close is the instant between the
// check and the write that follows it (one round trip): a server that
// goes down within it is caught by the next step's check, the reboot's.

// heldRecheck is how soon a server step held back asks again.
const heldRecheck = 3 * time.Second

// errHeldBack is a server's step held back by another server.
type errHeldBack struct{ node, why string }

func (e *errHeldBack) Error() string {
	if e.node == "" {
		return "server steps wait: " + e.why
	}
	return fmt.Sprintf("server node %s is down or busy: %s", e.node, e.why)
}

// serverRoleLabels are the labels that make a node a server (plan.Server).
var serverRoleLabels = []string{"node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master", "node-role.kubernetes.io/etcd"}

// serverMayGoDown asks the API server whether server node self may be
// taken down now; an *errHeldBack says which server holds it back (or
// that it cannot be told: then it waits too).
func (ctl *Controller) serverMayGoDown(ctx context.Context, self string) error {
	list, err := ctl.ops.UpdateChannels(ctl.opts.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return &errHeldBack{why: fmt.Sprintf("cannot list the channels to tell whether another server is down: %v", err)}
	}
	slotIn := map[string]string{}
	chans := make([]*v1.UpdateChannel, 0, len(list.Items))
	for i := range list.Items {
		ch := &list.Items[i]
		chans = append(chans, ch)
		for _, sl := range ch.Status.Updating {
			slotIn[sl.Node] = ch.Name
		}
	}
	refs := plan.Refs(chans)
	seen := map[string]bool{}
	var peers []plan.ServerPeer
	for _, role := range serverRoleLabels {
		nodes, err := ctl.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: role})
		if err != nil {
			return &errHeldBack{why: fmt.Sprintf("cannot list the server nodes to tell whether one is down: %v", err)}
		}
		for i := range nodes.Items {
			n := &nodes.Items[i]
			if seen[n.Name] || !selectedByAny(refs, n.Labels) {
				continue
			}
			seen[n.Name] = true
			peers = append(peers, plan.ServerPeer{SlotIn: slotIn[n.Name], ServerState: plan.ServerState{Name: n.Name, ReadyStatus: readyStatus(n),
				CordonedBySlipway: n.Spec.Unschedulable && drain.CordonedBy(n.Annotations) == protocol.CordonOwner}})
		}
	}
	if node, why := plan.ServerMayGoDown(self, peers); node != "" {
		return &errHeldBack{node: node, why: why}
	}
	return nil
}

// heldServer is a server step held back: its slot, the step, and when it
// may ask again.
type heldServer struct {
	slot  v1.Slot
	step  string // "drain" or "reboot"
	by    string // what held it, for its Event (once per holder)
	until time.Time
}

// holdStep records that slot's step waits (held: an *errHeldBack, another
// server; an *errBudgetSpent, the channel's other nodes down): an Event on
// ch (once per slot, step and holder), and a pass again after heldRecheck.
func (ctl *Controller) holdStep(ch *v1.UpdateChannel, slot v1.Slot, step string, held error) {
	by := held.Error()
	ctl.mu.Lock()
	if ctl.heldServers == nil {
		ctl.heldServers = map[string]heldServer{}
	}
	prev, had := ctl.heldServers[slot.Node]
	ctl.heldServers[slot.Node] = heldServer{slot: slot, step: step, by: by, until: time.Now().Add(heldRecheck)}
	ctl.mu.Unlock()
	ctl.queue.AddAfter(key{roleFleet, ch.Name}, heldRecheck)
	if had && plan.SameSlot(prev.slot, slot) && prev.step == step && prev.by == by {
		return
	}
	what := map[string]string{"drain": "its drain (the cordon not begun)", "reboot": "its reboot (drained, still cordoned)"}[step]
	ctl.log.Warn("a slot's step waits", "node", slot.Node, "channel", ch.Name, "step", step, "why", by)
	var h *errHeldBack
	var b *errBudgetSpent
	switch {
	case errors.As(held, &b):
		ctl.recorder.Eventf(ch, corev1.EventTypeWarning, "CapacityHeld",
			"node %s keeps its slot and waits with %s: %s; it goes on once fewer than %d are down", slot.Node, what, b.Error(), b.concurrency)
	case errors.As(held, &h) && h.node == "":
		ctl.recorder.Eventf(ch, corev1.EventTypeWarning, "ServerHeldBack", "server node %s keeps its slot and waits with %s: %s", slot.Node, what, h.why)
	case errors.As(held, &h):
		ctl.recorder.Eventf(ch, corev1.EventTypeWarning, "ServerHeldBack",
			"server node %s keeps its slot and waits with %s while server node %s is down or busy (%s): two servers down at once could cost the etcd quorum",
			slot.Node, what, h.node, h.why)
	}
}

// serverStepWaits tells whether slot's step was held back and may not ask
// again yet.
func (ctl *Controller) serverStepWaits(slot v1.Slot, step string) bool {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	h, ok := ctl.heldServers[slot.Node]
	return ok && h.step == step && plan.SameSlot(h.slot, slot) && time.Now().Before(h.until)
}

// releaseServerStep forgets that slot's step was held back (it went on).
func (ctl *Controller) releaseServerStep(slot v1.Slot) {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	if h, ok := ctl.heldServers[slot.Node]; ok && plan.SameSlot(h.slot, slot) {
		delete(ctl.heldServers, slot.Node)
	}
}

// permitReboots keeps from done the drains of server nodes that another
// server holds back now (asked of the API server): their slots are not
// marked Rebooting by this pass; they stay drained and cordoned, and a
// pass asks again after heldRecheck. It reports whether one was held.
func (ctl *Controller) permitReboots(ctx context.Context, ch *v1.UpdateChannel, done []drainRun) ([]drainRun, bool) {
	var out []drainRun
	held := false
	for _, d := range done {
		if !ctl.isServerNode(ctx, d.slot.Node) {
			out = append(out, d)
			continue
		}
		if ctl.serverStepWaits(d.slot, "reboot") {
			held = true
			continue
		}
		var h *errHeldBack
		if err := ctl.serverMayGoDown(ctx, d.slot.Node); errors.As(err, &h) {
			ctl.holdStep(ch, d.slot, "reboot", h)
			held = true
			continue
		}
		ctl.releaseServerStep(d.slot)
		out = append(out, d)
	}
	return out, held
}
