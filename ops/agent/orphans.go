package agent

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"slipway.dev/slipway/ops/agent/plan"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
)

// uncordonOrphans undoes, for their agents, slipway's cordons of the
// channel's nodes that no channel holds in a slot and whose agent is away
// (plan.Orphaned): every cordon slipway made is undone once no rollout
// needs it, even when the node's agent does not come back. Run once per
// resync by the Lease holder; a node whose agent reports uncordons itself.
func (a *Agent) uncordonOrphans(ctx context.Context, ch *v1.UpdateChannel, nodes []plan.Node) {
	held, err := a.heldNodes()
	if err != nil {
		return // cannot tell which nodes a rollout needs: touch none
	}
	now := time.Now()
	for _, n := range nodes {
		if n.CordonedBy != CordonOwner || held[n.Name] {
			continue
		}
		renewed, err := a.agentRenewed(ctx, n.Name)
		if err != nil || !plan.Orphaned(n, held[n.Name], renewed, a.agentTTL(), CordonOwner, now) {
			continue
		}
		changed, err := drain.Uncordon(ctx, a.kube, n.Name, CordonOwner, drain.Meta{Annotations: map[string]any{AnnotationDrainStarted: nil}})
		if err != nil {
			a.log.Warn("could not uncordon a node for its absent agent", "channel", ch.Name, "target", n.Name, "err", err)
			continue
		}
		if changed {
			a.log.Info("uncordoned a node for its absent agent: no channel holds it", "channel", ch.Name, "target", n.Name)
			a.recorder.Eventf(ch, corev1.EventTypeNormal, "Uncordoned",
				"uncordoned node %s for its agent, silent for more than %s: slipway had cordoned it and no channel holds it in a slot any more", n.Name, a.agentTTL())
		}
	}
}

// heldNodes are the nodes holding a slot in any channel of the namespace (from the informer's cache).
func (a *Agent) heldNodes() (map[string]bool, error) {
	out := map[string]bool{}
	list, err := a.channels.UpdateChannels(a.opts.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	for _, ch := range list {
		for _, s := range ch.Status.Updating {
			out[s.Node] = true
		}
	}
	return out, nil
}
