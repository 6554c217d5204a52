package controller

import (
	"context"

	"k8s.io/apimachinery/pkg/types"

	"slipway.dev/slipway/ops/lease"
	"slipway.dev/slipway/ops/protocol"
)

// elect competes for the controller's Lease until ctx ends and releases it
// then, so another replica takes over at once. Every write of the
// controller's clients is fenced by the Lease's tenure (lease.Tenure): a
// replica stalled past its tenure sends none, so two replicas never write
// the fleet's decisions at once. The elector has a client of its own,
// unfenced, to renew.
func (ctl *Controller) elect(ctx context.Context) {
	d := ctl.opts.LeaseDuration
	err := lease.Run(ctx, lease.Config{
		Client: ctl.leaseKube.CoordinationV1().Leases(ctl.opts.Namespace), Name: protocol.ControllerLease, Identity: ctl.opts.Identity,
		Duration: d, RenewDeadline: d * 2 / 3, RetryPeriod: d / 5, Tenure: ctl.tenure,
		Log: ctl.log,
		OnStartedLeading: func() {
			ctl.mu.Lock()
			ctl.leaderCtx, ctl.leaderStop = context.WithCancel(ctx) // the drains end with the tenure
			ctl.mu.Unlock()
			ctl.elected.Store(true)
			ctl.log.Info("took the fleet view of every channel")
			ctl.enqueueAll()
			ctl.queueAllViews()                 // views of channels deleted meanwhile go
			ctl.queue.Add(key{role: roleSweep}) // cordons a former holder left for slots gone
		},
		OnStoppedLeading: func() {
			ctl.elected.Store(false)
			ctl.mu.Lock()
			ctl.fleet = map[string]*fleetCache{} // the next tenure lists afresh
			ctl.views = map[types.UID]map[string]string{}
			ctl.drainsDone = nil // the next holder drains those slots again (nothing is left to evict)
			ctl.lastWritten = nil
			if ctl.leaderStop != nil {
				ctl.leaderStop() // the next holder resumes the drains under way
			}
			ctl.leaderCtx, ctl.leaderStop = nil, nil
			ctl.mu.Unlock()
			ctl.log.Info("handed over the fleet view")
		},
	})
	if err != nil {
		ctl.log.Error("cannot compete for the controller's lease", "lease", protocol.ControllerLease, "err", err)
	}
}

// leading reports whether this replica does the fleet view of channel:
// only while it holds its Lease.
func (ctl *Controller) leading(string) bool {
	return ctl.elected.Load()
}
