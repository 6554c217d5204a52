package controller

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/protocol"
)

// The agents' heartbeats, as the controller reads them: a Lease per node
// (protocol.AgentLeaseName), renewed by that node's agent every
// HeartbeatInterval. Only a node whose agent renewed recently takes a slot.

// agentTTL is how long a heartbeat counts: three intervals, so that one
// late or lost renewal does not make a node agent-less.
func (ctl *Controller) agentTTL() time.Duration { return 3 * ctl.opts.HeartbeatInterval }

// agentRenewed reads node's heartbeat: when its agent last reported (zero
// when it never did), or an error when that cannot be told.
func (ctl *Controller) agentRenewed(ctx context.Context, node string) (time.Time, error) {
	l, err := ctl.kube.CoordinationV1().Leases(ctl.opts.Namespace).Get(ctx, protocol.AgentLeaseName(node), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return time.Time{}, nil
	case err != nil:
		return time.Time{}, fmt.Errorf("read the heartbeat of node %s's agent: %w", node, err)
	// trust: ops.lease.heartbeat
	case l.Spec.RenewTime == nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != node:
		return time.Time{}, nil // only a Lease its node holds is its heartbeat
	}
	return l.Spec.RenewTime.Time, nil
}
