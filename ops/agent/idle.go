package agent

import (
	"context"
	"time"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// The node agent's bookkeeping beside its slot: the cordon left when it
// holds no slot, how long it waited for one, and its boot ID.

// cleanupIdle uncordons this node when slipway cordoned it and no channel
// holds it in a slot (a slot freed by the fleet view, a deleted channel).
func (a *Agent) cleanupIdle(ctx context.Context) error {
	node := a.ownNode()
	if node == nil || drain.CordonedBy(node.Annotations) != protocol.CordonOwner {
		return nil
	}
	list, err := a.listChannels()
	if err != nil {
		return err
	}
	for _, ch := range list {
		if s, _ := a.mySlot(ch, v1.Slot{}); s != nil && !a.reportedEnded(ch, *s) {
			return nil
		}
	}
	if _, err := a.uncordonAndPublish(ctx, a.readableVersions(), nil); err != nil {
		return err
	}
	a.log.Info("uncordoned: this node holds no slot any more")
	return a.writeVersions(ctx)
}

// noteWaiting remembers when this node started to wait for a slot.
func (a *Agent) noteWaiting(ch *v1.UpdateChannel) {
	node := a.ownNode()
	target := plan.Target(mustResolve(ch), ch.Status)
	running := a.readableVersions()
	a.mu.Lock()
	defer a.mu.Unlock()
	if node == nil || target == "" || running != nil && running.Rootfs == target {
		delete(a.waitSince, ch.Name)
		return
	}
	if _, ok := a.waitSince[ch.Name]; !ok {
		a.waitSince[ch.Name] = time.Now()
	}
}

func (a *Agent) noteSlot(channel string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t, ok := a.waitSince[channel]; ok {
		a.metrics.slotWait.Observe(time.Since(t).Seconds())
		delete(a.waitSince, channel)
	}
}

// bootID is the running boot's ID (bootIDOf, from the Node as the informer has it).
func (a *Agent) bootID() (string, error) { return a.bootIDOf(a.ownNode()) }

func mustResolve(ch *v1.UpdateChannel) plan.Settings {
	s, _ := plan.Resolve(ch.Spec)
	return s
}
