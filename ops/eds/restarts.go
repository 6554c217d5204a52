package eds

import (
	"sort"

	corev1 "k8s.io/api/core/v1"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/eds/plan"
)

// A canary's restart history belongs to the canary, not to a pod: each
// canary pod that restarted is remembered on the canary ERS (status
// canaryRestarts) with its highest count, so that deleting or evicting a
// crash-looping canary pod neither unpauses the canary nor lets it be
// validated on its replacement's zero restarts. A node's restarts are the
// sum over the canary pods it ran.

// mergeRestarts is history with what the canary pods say now: a pod's
// count only grows; pods that never restarted are not kept. Sorted by pod.
func mergeRestarts(history []v1.CanaryPodRestarts, pods []*corev1.Pod) []v1.CanaryPodRestarts {
	byPod := map[string]v1.CanaryPodRestarts{}
	for _, h := range history {
		byPod[h.Pod] = h
	}
	for _, p := range pods {
		// trust: eds.pod.restarts
		h := plan.PodHealth(p)
		if h.Restarts == 0 {
			continue
		}
		prev, ok := byPod[p.Name]
		if ok && prev.Restarts >= h.Restarts {
			continue
		}
		next := v1.CanaryPodRestarts{Pod: p.Name, Node: nodeOf(p), Restarts: h.Restarts, Reason: h.RestartReason}
		next.LastRestart.Time = h.LastRestart
		if ok && prev.LastRestart.After(h.LastRestart) {
			next.LastRestart = prev.LastRestart
		}
		byPod[p.Name] = next
	}
	out := make([]v1.CanaryPodRestarts, 0, len(byPod))
	for _, h := range byPod {
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pod < out[j].Pod })
	return out
}

// nodeRestarts sums history by node: restarts, the latest restart, and
// the reason of the pod with the most restarts.
func nodeRestarts(history []v1.CanaryPodRestarts) map[string]plan.Health {
	out := map[string]plan.Health{}
	most := map[string]int32{}
	for _, h := range history {
		n := out[h.Node]
		n.Restarts += h.Restarts
		if h.LastRestart.After(n.LastRestart) {
			n.LastRestart = h.LastRestart.Time
		}
		if h.Restarts > most[h.Node] {
			most[h.Node], n.RestartReason = h.Restarts, h.Reason
		}
		out[h.Node] = n
	}
	return out
}

// withHistory gives each canary node's health the restarts of the canary
// pods it ran before (current maps nodes to the index of their pod's health
// in pods). The history of nodes that are no canary node any more (the node
// left) is returned apart, as past: its restarts count, its readiness does
// not (a canary must not wait for a node that is gone). A canary node whose
// pod is gone counts as not Ready through the expected count.
func withHistory(pods []plan.Health, current map[string]int, canaryNodes []string, history []v1.CanaryPodRestarts) (_ []plan.Health, past []plan.Health) {
	onCanary := map[string]bool{}
	for _, n := range canaryNodes {
		onCanary[n] = true
	}
	byNode := nodeRestarts(history)
	nodes := make([]string, 0, len(byNode))
	for n := range byNode {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		prev := byNode[n]
		i, ok := current[n]
		if !ok {
			if onCanary[n] {
				pods = append(pods, prev) // not Ready: its pod is gone
			} else {
				past = append(past, prev)
			}
			continue
		}
		h := &pods[i]
		if prev.Restarts > h.Restarts {
			h.Restarts, h.RestartReason = prev.Restarts, prev.RestartReason
		}
		if prev.LastRestart.After(h.LastRestart) {
			h.LastRestart = prev.LastRestart
		}
	}
	return pods, past
}
