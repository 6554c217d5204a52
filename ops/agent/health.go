package agent

import (
	"context"
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
	for _, n := range behind {
		if found >= free && !plan.MustCheck(st, n, target) {
			continue
		}
		skip, ok := a.check(ctx, fc, n.Name)
		if !ok {
			continue
		}
		out[n.Name] = skip
		if skip == nil && startable[n.Name] {
			found++
		}
	}
	return out
}

// check returns node's check, from the cache when younger than the resync
// period; ok is false when it could not be read.
func (a *Agent) check(ctx context.Context, fc *fleetCache, node string) (*v1.SkippedNode, bool) {
	now := time.Now()
	if c, hit := fc.checks[node]; hit && now.Sub(c.at) < a.opts.Resync {
		return c.skip, true
	}
	n, err := a.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		a.log.Debug("cannot check node; it takes no slot this time", "node", node, "err", err)
		return nil, false
	}
	renewed, err := a.agentRenewed(ctx, node)
	if err != nil {
		a.log.Debug("cannot read the node's agent heartbeat; it takes no slot this time", "node", node, "err", err)
		return nil, false
	}
	ready, _ := nodeReady(n)
	skip := plan.Skip(node, plan.Health{Ready: ready, Unschedulable: n.Spec.Unschedulable, CordonedBy: drain.CordonedBy(n.Annotations),
		AgentRenewed: renewed, AgentTTL: a.agentTTL()}, CordonOwner, now)
	if fc.checks == nil {
		fc.checks = map[string]checked{}
	}
	fc.checks[node] = checked{at: now, skip: skip}
	return skip, true
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
