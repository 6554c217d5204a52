package controller

import (
	"context"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/internal/wallclock"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/process"
	"slipway.dev/slipway/ops/protocol"
)

// The fleet view's checks of nodes behind the target: their Node (Ready,
// spec.unschedulable, who cordoned it) and their agent's heartbeat. The
// node list the fleet view keeps is metadata only; a check GETs one Node
// and one Lease, so only the nodes about to take a slot are checked (and
// every server and failed node, which decide whether others may start),
// each at most once per resync.

// The nodes next in line are checked ahead, in the background: a pass
// that frees a slot then finds its next node's check in the cache and
// grants the slot with no GET on its way (the drains' outcomes and the
// folded reports it writes wait on no check).

// checked is one check's result: nil skip means the node may take a slot.
type checked struct {
	at   time.Time
	skip *v1.SkippedNode
}

// checksAhead are the checks made ahead of need: under way (by node) and
// done, by channel, until the channel's next pass takes them.
type checksAhead struct {
	mu       sync.Mutex
	underWay map[string]bool
	done     map[string]map[string]checked
	slots    chan struct{} // checkConcurrency at once
}

// checkBehind checks the nodes behind (in plan.Behind's order) until free
// eligible ones that may start now (startable: plan.Candidates, so a failed
// node in its backoff does not use up a free slot's check) are found, plus
// every node plan.MustCheck names, and returns the results by node (nil:
// eligible). A node that cannot be checked now is left out: it takes no
// slot this time. The ahead nodes next in line are then checked in the
// background (checkAhead).
func (ctl *Controller) checkBehind(ctx context.Context, fc *fleetCache, channel string, st v1.UpdateChannelStatus, behind []plan.Node, startable map[string]bool,
	free, ahead int, target string) map[string]*v1.SkippedNode {
	out := map[string]*v1.SkippedNode{}
	found := 0
	for i := 0; i < len(behind); {
		// A batch: the nodes that may fill the free slots if all are
		// healthy, and those that must be checked anyway; checked at once.
		var batch []string
		budget := free - found
		for ; i < len(behind); i++ {
			n := behind[i]
			must := plan.MustCheck(st, n, target)
			if !must && budget <= 0 {
				if found >= free {
					continue // enough found: only the ones that must be checked
				}
				break // check this batch before going further
			}
			batch = append(batch, n.Name)
			if !must && startable[n.Name] {
				budget--
			}
		}
		for name, skip := range ctl.checkAll(ctx, fc, batch) {
			out[name] = skip
			if skip == nil && startable[name] {
				found++
			}
		}
	}
	ctl.checkAhead(ctx, fc, channel, nextInLine(behind, out, startable, ahead))
	return out
}

// nextInLine are the first ahead nodes of behind that may start and were
// not checked by this pass: the ones the slots freed next go to.
func nextInLine(behind []plan.Node, checked map[string]*v1.SkippedNode, startable map[string]bool, ahead int) []string {
	var out []string
	for _, n := range behind {
		if len(out) >= ahead {
			break
		}
		if _, ok := checked[n.Name]; !ok && startable[n.Name] {
			out = append(out, n.Name)
		}
	}
	return out
}

// checkAhead checks, in the background, the nodes of channel whose check
// is missing or older than half the resync period (so that it is still
// fresh when their slot comes); the channel's next pass takes the results
// (takeChecksAhead).
func (ctl *Controller) checkAhead(ctx context.Context, fc *fleetCache, channel string, nodes []string) {
	now := time.Now()
	ca := &ctl.ahead
	ca.mu.Lock()
	defer ca.mu.Unlock()
	for _, n := range nodes {
		if c, hit := fc.checks[n]; hit && now.Sub(c.at) < ctl.opts.Resync/2 || ca.underWay[n] {
			continue
		}
		if _, waiting := ca.done[channel][n]; waiting { // done, not taken yet by a pass
			continue
		}
		if ca.underWay == nil {
			ca.underWay, ca.done, ca.slots = map[string]bool{}, map[string]map[string]checked{}, make(chan struct{}, checkConcurrency)
		}
		ca.underWay[n] = true
		go func() {
			ca.slots <- struct{}{}
			c := ctl.check(ctx, n)
			<-ca.slots
			ca.mu.Lock()
			defer ca.mu.Unlock()
			delete(ca.underWay, n)
			if c == nil {
				return // not readable now: checked when its slot comes
			}
			if ca.done[channel] == nil {
				ca.done[channel] = map[string]checked{}
			}
			ca.done[channel][n] = *c
		}()
	}
}

// forget drops the checks made ahead for a deleted channel.
func (ca *checksAhead) forget(channel string) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	delete(ca.done, channel)
}

// takeChecksAhead puts the checks made ahead for channel into fc.
func (ctl *Controller) takeChecksAhead(fc *fleetCache, channel string) {
	ca := &ctl.ahead
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if len(ca.done[channel]) == 0 {
		return
	}
	if fc.checks == nil {
		fc.checks = map[string]checked{}
	}
	for n, c := range ca.done[channel] {
		if old, ok := fc.checks[n]; !ok || c.at.After(old.at) {
			fc.checks[n] = c
		}
	}
	delete(ca.done, channel)
}

// checkConcurrency bounds the checks a pass makes at once (two GETs each).
const checkConcurrency = 8

// checkAll returns the checks of nodes: from the cache when younger than
// the resync period, else read now, several at once. A node that cannot be
// read is left out: it takes no slot this time.
func (ctl *Controller) checkAll(ctx context.Context, fc *fleetCache, nodes []string) map[string]*v1.SkippedNode {
	out := map[string]*v1.SkippedNode{}
	now := time.Now()
	var stale []string
	for _, n := range nodes {
		if c, hit := fc.checks[n]; hit && now.Sub(c.at) < ctl.opts.Resync {
			out[n] = c.skip
		} else {
			stale = append(stale, n)
		}
	}
	results := make([]*checked, len(stale))
	var wg sync.WaitGroup
	sem := make(chan struct{}, checkConcurrency)
	for i, n := range stale {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			results[i] = ctl.check(ctx, n)
		}()
	}
	wg.Wait()
	if fc.checks == nil {
		fc.checks = map[string]checked{}
	}
	for i, n := range stale {
		if c := results[i]; c != nil {
			fc.checks[n] = *c
			out[n] = c.skip
		}
	}
	return out
}

// check reads node's Node and its agent's heartbeat; nil when either cannot be read.
func (ctl *Controller) check(ctx context.Context, node string) *checked {
	n, err := ctl.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		ctl.log.Debug("cannot check node; it takes no slot this time", "node", node, "err", err)
		return nil
	}
	beat, err := ctl.agentHeartbeat(ctx, node) // judged on this controller's clock, not by the agent's renewTime
	if err != nil {
		ctl.log.Debug("cannot read the node's agent heartbeat; it takes no slot this time", "node", node, "err", err)
		return nil
	}
	ready, _ := process.NodeReady(n)
	now := time.Now() // the check's age is a local interval
	skip := plan.Skip(node, plan.Health{Ready: ready, Unschedulable: n.Spec.Unschedulable, CordonedBy: drain.CordonedBy(n.Annotations),
		Agent: beat, AgentTTL: ctl.agentTTL()}, protocol.CordonOwner, wallclock.At(now)) // the wall clock: the skip's since only
	return &checked{at: now, skip: skip}
}

// forgetChecks drops the cached checks older than the resync period.
func (ctl *Controller) forgetChecks(fc *fleetCache) {
	now := time.Now()
	for n, c := range fc.checks {
		if now.Sub(c.at) >= ctl.opts.Resync {
			delete(fc.checks, n)
		}
	}
}
