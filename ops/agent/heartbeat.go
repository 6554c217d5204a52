package agent

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"slipway.dev/slipway/ops/internal/wallclock"
	"slipway.dev/slipway/ops/protocol"
)

// The agent's heartbeat: a Lease per node in the agent's namespace, renewed
// every Options.HeartbeatInterval. The holder of a channel's Lease reads it
// to tell a node with a running agent from one without (the DaemonSet's
// pod not scheduled there, crash-looping, or the node powered off): only
// the former take slots. A Lease, not a Node annotation: its writes reach
// no Node watcher in the cluster.

// heartbeat renews this agent's Lease now and then every HeartbeatInterval until ctx ends.
func (a *Agent) heartbeat(ctx context.Context) {
	t := time.NewTicker(a.opts.HeartbeatInterval)
	defer t.Stop()
	alive := a.probe.Loop("heartbeat", 3*a.opts.HeartbeatInterval)
	for {
		if err := a.beat(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("could not renew this agent's heartbeat; retrying at the next interval", "err", err)
		}
		alive() // a failed renewal is the API's, not a wedged loop
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// beat creates or renews the heartbeat Lease. A renewal is one request:
// an update of the Lease as this process last wrote it. The Lease is read
// again only when that update is refused as stale (another writer, or a
// renewal whose answer was lost) or the Lease is gone: at thousands of
// nodes the read each renewal would be as many requests again.
func (a *Agent) beat(ctx context.Context) error {
	api := a.kube.CoordinationV1().Leases(a.opts.Namespace)
	name := protocol.AgentLeaseName(a.opts.NodeName)
	now := metav1.NewMicroTime(wallclock.Now())
	seconds := int32(a.agentTTL().Seconds())
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

// agentTTL is how long a heartbeat counts (the Lease's duration): three
// intervals, so that one late or lost renewal does not make a node agent-less.
func (a *Agent) agentTTL() time.Duration { return 3 * a.opts.HeartbeatInterval }
