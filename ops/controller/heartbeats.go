package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// The agents' heartbeats, as the controller reads them: a Lease per node
// (protocol.AgentLeaseName), renewed by that node's agent every
// HeartbeatInterval. Only a node whose agent renewed recently takes a slot.
//
// Recently is judged on this controller's clock alone, as Kubernetes' node
// lifecycle controller judges node Leases: the renewTime is written by the
// agent's clock, which may be minutes off this one's, so it is never
// compared with this clock. The controller notes, per node, the renewTime
// it read last and the local instant (time.Now, monotonic) at which it
// first read it; the agent has been silent for the time since then. A
// renewTime that differs from the one noted, earlier or later (a clock
// stepped back still renews), is a renewal; a first read (the controller
// just started, or just became the leader of a channel) counts as a
// renewal just seen, so an agent that is gone is judged so after one TTL
// of watching.

// agentTTL is how long a heartbeat counts: three intervals, so that one
// late or lost renewal does not make a node agent-less.
func (ctl *Controller) agentTTL() time.Duration { return protocol.AgentTTL(ctl.opts.HeartbeatInterval) }

// idleAgentTTL is the longest an agent's Lease may make its heartbeat
// count: three of an idle agent's intervals (protocol.IdleHeartbeat).
func (ctl *Controller) idleAgentTTL() time.Duration {
	return protocol.AgentTTL(protocol.IdleHeartbeat(ctl.opts.HeartbeatInterval))
}

// leaseTTL is how long the renewal of l counts (plan.HeartbeatTTL): its
// declared duration within [agentTTL, idleAgentTTL].
func (ctl *Controller) leaseTTL(l *coordinationv1.Lease) time.Duration {
	var declared time.Duration
	if l.Spec.LeaseDurationSeconds != nil {
		declared = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return plan.HeartbeatTTL(declared, ctl.agentTTL(), ctl.idleAgentTTL())
}

// heartbeatSeen is one node's heartbeat as this controller read it: the
// renewTime last read, and the local instant it was first read.
type heartbeatSeen struct {
	renew time.Time
	first time.Time
}

// nextSeen is what the controller notes after reading renew at now (a
// time.Now reading), prev being what it noted before (ok false: nothing).
// Only a change of renewTime restarts the silence.
func nextSeen(prev heartbeatSeen, ok bool, renew, now time.Time) heartbeatSeen {
	if ok && prev.renew.Equal(renew) {
		return prev
	}
	return heartbeatSeen{renew: renew, first: now}
}

// heartbeats are the timestamps another party wrote (the agents' renewTimes,
// the nodes' Ready transitions) as the controller read them, by node; checks
// run in parallel, hence the lock. The zero value is ready for use.
type heartbeats struct {
	mu   sync.Mutex
	seen map[string]heartbeatSeen
}

// read notes that node's Lease carries renew at now and returns how long
// it has carried it, as far as this controller saw.
func (h *heartbeats) read(node string, renew, now time.Time) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen == nil {
		h.seen = map[string]heartbeatSeen{}
	}
	prev, ok := h.seen[node]
	s := nextSeen(prev, ok, renew, now)
	h.seen[node] = s
	return now.Sub(s.first)
}

// forget drops what was noted of node's heartbeat: it has none now.
func (h *heartbeats) forget(node string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.seen, node)
}

// agentHeartbeat reads node's heartbeat: whether its agent ever reported
// (a Lease its node holds) and for how long this controller has seen it
// silent, or an error when that cannot be told.
func (ctl *Controller) agentHeartbeat(ctx context.Context, node string) (plan.Heartbeat, error) {
	l, err := ctl.kube.CoordinationV1().Leases(ctl.opts.Namespace).Get(ctx, protocol.AgentLeaseName(node), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		ctl.beats.forget(node)
		return plan.Heartbeat{}, nil
	case err != nil:
		return plan.Heartbeat{}, fmt.Errorf("read the heartbeat of node %s's agent: %w", node, err)
	// trust: ops.lease.heartbeat
	case l.Spec.RenewTime == nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != node:
		ctl.beats.forget(node)
		return plan.Heartbeat{}, nil // only a Lease its node holds is its heartbeat
	}
	return plan.Heartbeat{Reported: true, SilentFor: ctl.beats.read(node, l.Spec.RenewTime.Time, time.Now()), TTL: ctl.leaseTTL(l)}, nil
}
