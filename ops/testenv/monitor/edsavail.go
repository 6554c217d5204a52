package monitor

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"slipway.dev/slipway/ops/eds/plan"
)

// InvEDSMaxUnavailable names the rule EDSMaxUnavailable.
const InvEDSMaxUnavailable = "eds-max-unavailable"

// EDSMaxUnavailable: an ExtendedDaemonSet never has more than its
// maxUnavailable (over the nodes it covers; at least 1, as the controller
// counts it) of its covered nodes without a Ready pod of it. A node is
// covered once the monitor saw a Ready pod of the ExtendedDaemonSet on it,
// until the Node is deleted. Nodes that are NotReady, or Ready again for
// less than Limits.NodeGrace, are not counted: a fault takes their pods
// down, not the controller (the controller ignores unresponsive nodes
// too), and kwok and the node lifecycle controller take a while to mark
// their pods Ready again.
func EDSMaxUnavailable(s State, l Limits) ([]Finding, error) {
	l = l.withDefaults()
	var out []Finding
	ready := map[string]map[string]bool{} // EDS key -> nodes with a Ready, live pod of it
	for _, p := range s.Pods {
		if p.Ready && !p.Terminating && p.Node != "" {
			k := p.Namespace + "/" + p.EDS
			if ready[k] == nil {
				ready[k] = map[string]bool{}
			}
			ready[k][p.Node] = true
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.EDS)) {
		e := s.EDS[k]
		var covered, down, objs []string
		for _, node := range slices.Sorted(maps.Keys(e.Covered)) {
			n, ok := s.Nodes[node]
			if !ok {
				continue
			}
			covered = append(covered, node)
			if !n.Ready || s.Now.Sub(n.ReadySince) < l.NodeGrace || ready[k][node] {
				continue
			}
			down = append(down, node)
			objs = append(objs, nodeKey(node))
		}
		limit, err := plan.Scaled(e.MaxUnavailable, len(covered), 1)
		if err != nil {
			return nil, fmt.Errorf("ExtendedDaemonSet %s: maxUnavailable: %w", k, err)
		}
		limit = max(limit, 1)
		if len(down) > limit {
			out = append(out, Finding{Invariant: InvEDSMaxUnavailable, Key: k,
				Message: fmt.Sprintf("ExtendedDaemonSet %s: %d of its %d nodes without a Ready pod, maxUnavailable %d: %s",
					k, len(down), len(covered), limit, strings.Join(down, ", ")),
				Objects: append([]string{"ExtendedDaemonSet/" + k}, objs...)})
		}
	}
	return out, nil
}

// defaultNodeGrace is Limits.NodeGrace's default.
const defaultNodeGrace = 20 * time.Second
