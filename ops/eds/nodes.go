package eds

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/eds/plan"
)

// A Node change resyncs only the ExtendedDaemonSets it concerns: a node's
// status heartbeats (every node, every few seconds) resync none, and a
// label, taint or resource annotation change resyncs those with a pod on
// the node or whose templates admit it before or after.

// asNode is the Node of an informer notification (nil if none).
func asNode(o any) *corev1.Node {
	if m, ok := metaOf(o); ok {
		n, _ := m.(*corev1.Node)
		return n
	}
	return nil
}

// placementChanged says whether an update of a Node changes what placement
// (plan.Eligible, plan.MayStay) or the resource overrides read: its labels,
// taints, deletion, or its resource annotations.
func placementChanged(old, cur *corev1.Node) bool {
	// trust: eds.node.placement
	return !equality.Semantic.DeepEqual(old.Labels, cur.Labels) ||
		!equality.Semantic.DeepEqual(old.Spec.Taints, cur.Spec.Taints) ||
		(old.DeletionTimestamp == nil) != (cur.DeletionTimestamp == nil) ||
		!equality.Semantic.DeepEqual(resourceAnnotations(old), resourceAnnotations(cur))
}

// resourceAnnotations are a node's resource override annotations (ours and DataDog's).
func resourceAnnotations(n *corev1.Node) map[string]string {
	out := map[string]string{}
	for k, v := range n.Annotations {
		if strings.HasPrefix(k, v1.NodeResourcesPrefix) || strings.HasPrefix(k, v1.DataDogNodeResourcesPrefix) {
			out[k] = v
		}
	}
	return out
}

// onNode enqueues the ExtendedDaemonSets a Node's addition, update or
// removal concerns (old nil: added; cur nil: removed).
func (c *Controller) onNode(old, cur *corev1.Node) {
	if old != nil && cur != nil && !placementChanged(old, cur) {
		return
	}
	// The EDSs with a pod there, through the pods' node index (not a scan
	// of every pod of every EDS per Node event).
	queued := map[string]bool{}
	for _, n := range []*corev1.Node{old, cur} {
		if n == nil {
			continue
		}
		pods, _ := c.pods.ByIndex(indexByNode, n.Name)
		for _, o := range pods {
			p := o.(*corev1.Pod)
			if key := p.Namespace + "/" + p.Labels[v1.LabelName]; !queued[key] {
				queued[key] = true
				c.queue.Add(key)
			}
		}
	}
	list, err := c.sets.List(labels.Everything())
	if err != nil {
		return
	}
	for _, e := range list {
		if key := e.Namespace + "/" + e.Name; !queued[key] && c.concerns(e, old, cur) {
			c.queue.Add(key)
		}
	}
}

// concerns says whether e admits one of nodes under its spec's template or
// its active ERS's (onNode finds those with a pod there by the index).
func (c *Controller) concerns(e *v1.ExtendedDaemonSet, nodes ...*corev1.Node) bool {
	sel, err := plan.Selector(e.Spec.Selector)
	if err != nil {
		return true // the sync reports it
	}
	specs := []*corev1.PodSpec{&e.Spec.Template.Spec}
	if s, err := c.ers.ExtendedDaemonSetReplicaSets(e.Namespace).Get(e.Status.ActiveReplicaSet); err == nil {
		specs = append(specs, &s.Spec.Template.Spec)
	}
	for _, n := range nodes {
		if n == nil {
			continue
		}
		for _, spec := range specs {
			if plan.MayStay(n, sel, spec) {
				return true
			}
		}
	}
	return false
}
