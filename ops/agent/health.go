package agent

import (
	"context"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/agent/plan"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
)

// The fleet view's checks of nodes behind the target: their Node (Ready,
// spec.unschedulable, who cordoned it) and their agent's heartbeat. The
// node list the fleet view keeps is metadata only; a check GETs one Node
// and one Lease, so only the nodes about to take a slot are checked (and
// every server and failed node, which decide whether others may start),
// each at most once per resync.

// checked is one check's result: nil skip means the node may take a slot.
type checked struct {
	at   time.Time
	skip *v1.SkippedNode
}

// checkBehind checks the nodes behind (in plan.Behind's order) until free
// eligible ones that may start now (startable: plan.Candidates, so a failed
// node in its backoff does not use up a free slot's check) are found, plus
// every node plan.MustCheck names, and returns the results by node (nil:
// eligible). A node that cannot be checked now is left out: it takes no
// slot this time.
func (a *Agent) checkBehind(ctx context.Context, fc *fleetCache, st v1.UpdateChannelStatus, behind []plan.Node, startable map[string]bool,
	free int, target string) map[string]*v1.SkippedNode {
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
		for name, skip := range a.checkAll(ctx, fc, batch) {
			out[name] = skip
			if skip == nil && startable[name] {
				found++
			}
		}
	}
	return out
}

// checkConcurrency bounds the checks a pass makes at once (two GETs each).
const checkConcurrency = 8

// checkAll returns the checks of nodes: from the cache when younger than
// the resync period, else read now, several at once. A node that cannot be
// read is left out: it takes no slot this time.
func (a *Agent) checkAll(ctx context.Context, fc *fleetCache, nodes []string) map[string]*v1.SkippedNode {
	out := map[string]*v1.SkippedNode{}
	now := time.Now()
	var stale []string
	for _, n := range nodes {
		if c, hit := fc.checks[n]; hit && now.Sub(c.at) < a.opts.Resync {
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
			results[i] = a.check(ctx, n)
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
func (a *Agent) check(ctx context.Context, node string) *checked {
	n, err := a.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		a.log.Debug("cannot check node; it takes no slot this time", "node", node, "err", err)
		return nil
	}
	renewed, err := a.agentRenewed(ctx, node)
	if err != nil {
		a.log.Debug("cannot read the node's agent heartbeat; it takes no slot this time", "node", node, "err", err)
		return nil
	}
	ready, _ := nodeReady(n)
	now := time.Now()
	skip := plan.Skip(node, plan.Health{Ready: ready, Unschedulable: n.Spec.Unschedulable, CordonedBy: drain.CordonedBy(n.Annotations),
		AgentRenewed: renewed, AgentTTL: a.agentTTL()}, CordonOwner, now)
	return &checked{at: now, skip: skip}
}

// forgetChecks drops the cached checks older than the resync period.
func (a *Agent) forgetChecks(fc *fleetCache) {
	now := time.Now()
	for n, c := range fc.checks {
		if now.Sub(c.at) >= a.opts.Resync {
			delete(fc.checks, n)
		}
	}
}
