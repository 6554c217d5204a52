package agent

import (
	"context"

	"k8s.io/apimachinery/pkg/types"

	"slipway.dev/slipway/ops/lease"
)

// elect competes for the controller's Lease until ctx ends and releases it
// then, so another replica takes over at once. Every write of the
// controller's clients is fenced by the Lease's tenure (lease.Tenure): a
// replica stalled past its tenure sends none, so two replicas never write
// the fleet's decisions at once. The elector has a client of its own,
// unfenced, to renew.
func (a *Agent) elect(ctx context.Context) {
	d := a.opts.LeaseDuration
	err := lease.Run(ctx, lease.Config{
		Client: a.leaseKube.CoordinationV1().Leases(a.opts.Namespace), Name: ControllerLease, Identity: a.opts.NodeName,
		Duration: d, RenewDeadline: d * 2 / 3, RetryPeriod: d / 5, Tenure: a.tenure,
		Log: a.log,
		OnStartedLeading: func() {
			a.mu.Lock()
			a.leaderCtx, a.leaderStop = context.WithCancel(ctx) // the drains end with the tenure
			a.mu.Unlock()
			a.elected.Store(true)
			a.log.Info("took the fleet view of every channel")
			a.enqueueAll(roleFleet)
			a.queueAllViews()                 // views of channels deleted meanwhile go
			a.queue.Add(key{role: roleSweep}) // cordons a former holder left for slots gone
		},
		OnStoppedLeading: a.handOver,
	})
	if err != nil {
		a.log.Error("cannot compete for the controller's lease", "lease", ControllerLease, "err", err)
	}
}

// handOver ends this process's tenure of the fleet view: the next holder
// lists afresh, resumes the drains under way, and alone reports the fleet
// view's series (a former holder's last values would otherwise linger,
// and alerts would read a finished rollout as stalled).
func (a *Agent) handOver() {
	a.elected.Store(false)
	a.mu.Lock()
	a.fleet = map[string]*fleetCache{} // the next tenure lists afresh
	a.views = map[types.UID]map[string]string{}
	a.drainsDone = nil // the next holder drains those slots again (nothing is left to evict)
	a.lastWritten = nil
	if a.leaderStop != nil {
		a.leaderStop() // the next holder resumes the drains under way
	}
	a.leaderCtx, a.leaderStop = nil, nil
	a.mu.Unlock()
	a.metrics.nodes.Reset()
	a.metrics.fleet.skipped.Reset()
	a.log.Info("handed over the fleet view")
}

// leading reports whether this process does the fleet view of channel:
// only the controller, and only while it holds its Lease.
func (a *Agent) leading(string) bool {
	return a.controller && a.elected.Load()
}
