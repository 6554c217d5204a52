package agent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"slipway.dev/slipway/ops/agent/plan"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// One server down at a time across every channel. Servers-first and the
// one-server limit of plan.Assign hold within a channel; with two channels
// (a canary beside the default) each channel's Lease holder would let one
// of its servers go down, two etcd members at once. Two parts:
//
//   - the fleet view grants no server slot while a server of another
//     channel holds a slot (read from the cache of channels and the
//     server-slot Lease), so a second server rarely waits;
//   - the node side is the guarantee: before it cordons, a server node's
//     agent takes the Lease ServerSlotLease (a compare-and-swap on its
//     resourceVersion by the API server), naming its channel, the
//     channel's UID, its node and its slot's claim time. Another holder
//     counts while the API server confirms that holder's slot; a holder
//     whose slot ended is taken over. A server that finds the Lease busy
//     waits (serverWait) without draining.

// ServerSlotLease names the Lease held by the one server node that may be down.
const ServerSlotLease = "slipway-server-slot"

// serverWait is how often a server node waiting for the server slot asks again.
const serverWait = 5 * time.Second

// errServerBusy says another channel's server node holds the server slot.
var errServerBusy = errors.New("another server node is being upgraded")

// serverHolder is the server-slot Lease's holder for slot of ch.
func serverHolder(ch *v1.UpdateChannel, slot v1.Slot) string {
	return fmt.Sprintf("%s/%s/%s/%d", ch.Name, ch.UID, slot.Node, slot.Since.Unix())
}

// serverSlotHeld tells whether holder's slot is still held: by ch (the
// channel named in holder as read fresh or from the cache) at the same UID
// and claim time.
func serverSlotHeld(holder string, ch *v1.UpdateChannel) bool {
	parts := strings.Split(holder, "/")
	if len(parts) != 4 || ch == nil || string(ch.UID) != parts[1] {
		return false
	}
	i := plan.FindSlot(ch.Status, parts[2])
	return i >= 0 && strconv.FormatInt(ch.Status.Updating[i].Since.Unix(), 10) == parts[3]
}

func holderChannel(holder string) string { c, _, _ := strings.Cut(holder, "/"); return c }

// isServer tells whether this agent's node is a control-plane or etcd node.
func (a *Agent) isServer() bool {
	n := a.ownNode()
	return n != nil && plan.Server(plan.Node{Labels: n.Labels})
}

// takeServerSlot takes the server-slot Lease for slot of ch, or returns
// errServerBusy while another server's slot holds it.
func (a *Agent) takeServerSlot(ctx context.Context, ch *v1.UpdateChannel, slot v1.Slot) error {
	api := a.kube.CoordinationV1().Leases(a.opts.Namespace)
	me := serverHolder(ch, slot)
	now := metav1.NewMicroTime(time.Now())
	l, err := api.Get(ctx, ServerSlotLease, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: ServerSlotLease, Namespace: a.opts.Namespace,
			Labels: map[string]string{LabelManagedBy: LabelManagedByAgent}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &me, AcquireTime: &now}}
		if _, err = api.Create(ctx, l, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			return errServerBusy // taken a moment ago: look again
		}
		return wrapServerSlot(err)
	} else if err != nil {
		return wrapServerSlot(err)
	}
	if h := l.Spec.HolderIdentity; h != nil && *h == me {
		return nil
	} else if h != nil && *h != "" {
		other, err := a.ops.UpdateChannels(a.opts.Namespace).Get(ctx, holderChannel(*h), metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return wrapServerSlot(err)
		}
		if err == nil && serverSlotHeld(*h, other) {
			return fmt.Errorf("%w (%s)", errServerBusy, *h)
		}
	}
	l.Spec.HolderIdentity, l.Spec.AcquireTime = &me, &now
	if _, err := api.Update(ctx, l, metav1.UpdateOptions{}); apierrors.IsConflict(err) {
		return errServerBusy // another server took it first
	} else if err != nil {
		return wrapServerSlot(err)
	}
	a.mu.Lock()
	a.serverSlot = me
	a.mu.Unlock()
	a.log.Info("took the server slot: no other server node goes down meanwhile", "channel", ch.Name)
	return nil
}

func wrapServerSlot(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("take the server-slot Lease %s: %w", ServerSlotLease, err)
}

// releaseServerSlot gives the server-slot Lease back when this process
// took it for a slot of ch and that slot ended (a restarted agent does not
// know it took it: the next server takes the Lease over once the slot is
// gone).
func (a *Agent) releaseServerSlot(ctx context.Context, ch *v1.UpdateChannel) error {
	a.mu.Lock()
	mine := a.serverSlot
	a.mu.Unlock()
	if mine == "" || !strings.HasPrefix(mine, ch.Name+"/"+string(ch.UID)+"/") {
		return nil
	}
	api := a.kube.CoordinationV1().Leases(a.opts.Namespace)
	l, err := api.Get(ctx, ServerSlotLease, metav1.GetOptions{})
	if err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == mine {
		empty := ""
		l.Spec.HolderIdentity = &empty
		_, err = api.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("give the server-slot Lease back: %w", err)
	}
	a.mu.Lock()
	a.serverSlot = ""
	a.mu.Unlock()
	return nil
}

// serverBusyElsewhere tells the fleet view of channel name whether a
// server of another channel holds a slot: the server-slot Lease's holder,
// or a slot in another channel's status whose Node is a server.
func (a *Agent) serverBusyElsewhere(ctx context.Context, name string) bool {
	list, err := a.channels.UpdateChannels(a.opts.Namespace).List(labels.Everything())
	if err != nil {
		return true // cannot tell: no server starts
	}
	byName := map[string]*v1.UpdateChannel{}
	for _, ch := range list {
		byName[ch.Name] = ch
	}
	if l, err := a.kube.CoordinationV1().Leases(a.opts.Namespace).Get(ctx, ServerSlotLease, metav1.GetOptions{}); err == nil {
		if h := l.Spec.HolderIdentity; h != nil && holderChannel(*h) != name && serverSlotHeld(*h, byName[holderChannel(*h)]) {
			return true
		}
	} else if !apierrors.IsNotFound(err) {
		return true
	}
	for _, ch := range list {
		if ch.Name == name {
			continue
		}
		for _, sl := range ch.Status.Updating {
			n, err := a.kube.CoreV1().Nodes().Get(ctx, sl.Node, metav1.GetOptions{})
			if err == nil && plan.Server(plan.Node{Labels: n.Labels}) {
				return true
			}
		}
	}
	return false
}
