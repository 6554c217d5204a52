package agent

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/wallclock"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// The agent's heartbeat: a Lease per node in the agent's namespace, renewed
// every Options.HeartbeatInterval while a channel asks something of the
// node and every protocol.IdleHeartbeats intervals while none does; the
// Lease's duration says which (three of the intervals it waits). The
// controller reads it to tell a node with a running agent from one
// without (the DaemonSet's pod not scheduled there, crash-looping, or the
// node powered off): only the former take slots. A Lease, not a Node
// annotation: its writes reach no Node watcher in the cluster.

// heartbeat renews this agent's Lease now and then every beatInterval
// until ctx ends: every HeartbeatInterval while a channel asks something
// of this node, every protocol.IdleHeartbeats of them while nothing does.
// Work that arrives while it beats slowly (a new target, a slot) renews
// at once (wakeHeartbeat), with the short duration.
func (a *Agent) heartbeat(ctx context.Context) {
	alive := a.probe.Loop("heartbeat", 3*protocol.IdleHeartbeat(a.opts.HeartbeatInterval))
	for {
		// Armed before busy is read: work seen from here on wakes the
		// loop again, even work that lands while this renewal is on its way.
		a.beatingIdle.Store(true)
		busy := a.busy()
		a.beatingIdle.Store(!busy)
		interval := beatInterval(busy, a.opts.HeartbeatInterval)
		if err := a.beat(ctx, interval); err != nil && ctx.Err() == nil {
			a.log.Warn("could not renew this agent's heartbeat; retrying at the next interval", "err", err)
		}
		alive() // a failed renewal is the API's, not a wedged loop
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-a.beatWake:
			t.Stop()
		}
	}
}

// beatInterval is how long the agent waits until its next renewal: the
// heartbeat interval while busy, protocol.IdleHeartbeat of it while idle.
func beatInterval(busy bool, interval time.Duration) time.Duration {
	if busy {
		return interval
	}
	return protocol.IdleHeartbeat(interval)
}

// wakeHeartbeat renews the heartbeat at once when it beats slowly and a
// channel now asks something of this node: the controller then judges
// the node by the short duration from the start of its work.
func (a *Agent) wakeHeartbeat() {
	if !a.beatingIdle.Load() || !a.busy() {
		return
	}
	select {
	case a.beatWake <- struct{}{}:
	default:
	}
}

// busy reports whether a channel asks something of this node: it holds a
// slot it has not reported ended (a view may show an ended slot until the
// controller frees it), or the channel's target is not what this boot
// runs.
func (a *Agent) busy() bool {
	list, err := a.listChannels()
	if err != nil {
		return true
	}
	running := a.readableVersions()
	for _, ch := range list {
		if a.asks(ch, running) {
			return true
		}
	}
	return false
}

// asks reports whether channel ch asks something of this node, which runs
// running (nil: unreadable): it holds a slot it has not reported ended, or
// the channel's target is not what this boot runs.
func (a *Agent) asks(ch *v1.UpdateChannel, running *Versions) bool {
	if s, _ := a.mySlot(ch, v1.Slot{}); s != nil && !a.reportedEnded(ch, *s) {
		return true
	}
	target := plan.Target(mustResolve(ch), ch.Status)
	return target != "" && (running == nil || running.Rootfs != target)
}

// beat creates or renews the heartbeat Lease. A renewal is one request:
// an update of the Lease as this process last wrote it. The Lease is read
// again only when that update is refused as stale (another writer, or a
// renewal whose answer was lost) or the Lease is gone: at thousands of
// nodes the read each renewal would be as many requests again.
func (a *Agent) beat(ctx context.Context, interval time.Duration) error {
	api := a.kube.CoordinationV1().Leases(a.opts.Namespace)
	name := protocol.AgentLeaseName(a.opts.NodeName)
	now := metav1.NewMicroTime(wallclock.Now())
	seconds := int32(protocol.AgentTTL(interval).Seconds())
	if last := a.beatLease; last != nil {
		l := last.DeepCopy()
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &a.opts.NodeName, &seconds, &now
		renewed, err := api.Update(ctx, l, metav1.UpdateOptions{})
		if err == nil {
			a.beatLease = renewed
			return nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return fmt.Errorf("renew the heartbeat lease %s: %w", name, err)
		}
		a.beatLease = nil // read it again below
	}
	l, err := api.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: a.opts.Namespace,
			Labels:      map[string]string{protocol.LabelManagedBy: protocol.LabelManagedByAgent, protocol.LabelJobNode: protocol.LabelValue(a.opts.NodeName)},
			Annotations: map[string]string{protocol.AnnotationJobNode: a.opts.NodeName}}}
		l.Spec = coordinationv1.LeaseSpec{HolderIdentity: &a.opts.NodeName, LeaseDurationSeconds: &seconds, AcquireTime: &now, RenewTime: &now}
		l, err = api.Create(ctx, l, metav1.CreateOptions{})
	} else if err == nil {
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &a.opts.NodeName, &seconds, &now
		l, err = api.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("renew the heartbeat lease %s: %w", name, err)
	}
	a.beatLease = l
	return nil
}
