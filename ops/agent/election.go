package agent

import (
	"context"
	"sync/atomic"

	"slipway.dev/slipway/ops/lease"
)

// election is this agent's candidacy for one channel's Lease.
type election struct {
	cancel  context.CancelFunc
	done    chan struct{}
	leading atomic.Bool
}

// ensureElection starts competing for channel's Lease unless already doing so.
func (a *Agent) ensureElection(channel string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.elections[channel]; ok {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &election{cancel: cancel, done: make(chan struct{})}
	a.elections[channel] = e
	go a.runElection(ctx, channel, e)
}

func (a *Agent) runElection(ctx context.Context, channel string, e *election) {
	defer close(e.done)
	d := a.opts.LeaseDuration
	err := lease.Run(ctx, lease.Config{
		Client: a.kube.CoordinationV1().Leases(a.opts.Namespace), Name: LeasePrefix + channel, Identity: a.opts.NodeName,
		Duration: d, RenewDeadline: d * 2 / 3, RetryPeriod: d / 5,
		Log: a.log.With("channel", channel),
		OnStartedLeading: func() {
			e.leading.Store(true)
			a.log.Info("took the channel's fleet view", "channel", channel)
			a.queue.Add(key{roleFleet, channel})
		},
		OnStoppedLeading: func() {
			e.leading.Store(false)
			a.log.Info("handed over the channel's fleet view", "channel", channel)
		},
	})
	if err != nil {
		a.log.Error("cannot compete for the channel's lease", "channel", channel, "err", err)
	}
}

// leading reports whether this agent holds channel's Lease.
func (a *Agent) leading(channel string) bool {
	a.mu.Lock()
	e := a.elections[channel]
	a.mu.Unlock()
	return e != nil && e.leading.Load()
}

func (a *Agent) stopElection(channel string) {
	a.mu.Lock()
	e := a.elections[channel]
	delete(a.elections, channel)
	delete(a.fleet, channel)
	a.mu.Unlock()
	if e != nil {
		e.cancel()
		<-e.done
	}
}

// stopElections releases every Lease this agent holds, so another agent takes over at once.
func (a *Agent) stopElections() {
	a.mu.Lock()
	var names []string
	for n := range a.elections {
		names = append(names, n)
	}
	a.mu.Unlock()
	for _, n := range names {
		a.stopElection(n)
	}
}
