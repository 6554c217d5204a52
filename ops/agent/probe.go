package agent

import (
	"context"
	"time"

	"k8s.io/client-go/tools/cache"
)

// /healthz and /readyz (ops/health), served beside /metrics, for the
// agent and the controller alike. Healthy: the workers take a pulse from
// the queue at least every Options.LoopAllowance (a pulse is queued every
// pulseEvery(), so an idle worker beats too, and a worker wedged in a sync
// that never returns, while the others are busy or wedged as well, does
// not); the agent's heartbeat loop renews within three of its intervals.
// Ready: the informers synced. The controller is healthy and ready while
// it is not the leader: it is waiting, not stuck.

// pulseEvery is how often a pulse is queued for the workers: every 10 s,
// or a quarter of the allowance when that is shorter.
func (a *Agent) pulseEvery() time.Duration { return min(10*time.Second, a.opts.LoopAllowance/4) }

// rolePulse is a pulse: a worker that takes it beats the workers' loop.
const rolePulse role = 100

// startProbe registers the workers' loop and queues its pulses until ctx ends.
func (a *Agent) startProbe(ctx context.Context) {
	a.workersBeat = a.probe.Loop("workers", a.opts.LoopAllowance)
	go func() {
		t := time.NewTicker(a.pulseEvery())
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				a.queue.Add(key{role: rolePulse})
			}
		}
	}()
}

// readyWhen makes readiness wait for informers to sync.
func (a *Agent) readyWhen(infs ...cache.SharedIndexInformer) {
	for _, inf := range infs {
		a.probe.ReadyWhen("informers synced", inf.HasSynced)
	}
}
