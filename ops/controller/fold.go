package controller

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/protocol"
)

// The controller's side of the nodes' reports (report.go): it watches the
// Nodes' metadata, and a node's changed report starts a pass of the fleet
// view, which folds the reports of the nodes holding slots or permits into
// the channel's status (plan.Fold) in the same write as its own decisions.

// nodeMetaChanged wakes what a Node's metadata change asks for (the
// Node informer's update, availability.go): a changed report wakes the
// fleet view of every channel; views changed by another hand, or removed,
// are written again.
func (ctl *Controller) nodeMetaChanged(o, n *metav1.ObjectMeta) {
	if o.Annotations[protocol.AnnotationSlotReport] != n.Annotations[protocol.AnnotationSlotReport] {
		ctl.enqueueAll()
	}
	if viewsChanged(o.Annotations, n.Annotations) {
		ctl.viewQueue.Add(n.Name)
	}
}

// nodeMeta is the metadata of a Node from the controller's Node cache.
func nodeMeta(o any) (*metav1.ObjectMeta, bool) {
	n, ok := o.(*corev1.Node)
	if !ok {
		return nil, false
	}
	return &n.ObjectMeta, true
}

// forgetNode drops what the controller remembers of a deleted Node (its
// last view write, its last slot's claim time): kept, they would grow with
// every node the cluster ever had.
func (ctl *Controller) forgetNode(o any) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	m, ok := nodeMeta(o)
	if !ok {
		return
	}
	ctl.memo.forget(m.Name)
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	delete(ctl.viewWrites, m.Name)
	delete(ctl.objectWrites, m.Name)
	delete(ctl.claims, m.Name)
}

// nodeSnapshot is the controller's cache of Node metadata at one moment,
// by name. A pass reads a node's versions and its report from the same
// object: the agent writes its new versions and the report that ends its
// slot in one write, so a pass that folds a slot's end never reads that
// node at its old version (a later report read beside an earlier version
// would give the node that just finished its slot again).
func (ctl *Controller) nodeSnapshot() map[string]*metav1.ObjectMeta {
	out := map[string]*metav1.ObjectMeta{}
	if ctl.nodes == nil {
		return out
	}
	for _, o := range ctl.nodes.List() {
		if m, ok := nodeMeta(o); ok {
			out[m.Name] = m
		}
	}
	ctl.withObjectReports(out)
	return out
}

// viewsChanged reports whether a Node's view annotations changed.
func viewsChanged(old, cur map[string]string) bool {
	differ := func(x, y map[string]string) bool {
		for k, v := range x {
			if w, ok := y[k]; strings.HasPrefix(k, protocol.AnnotationChannelViewPrefix) && (!ok || w != v) {
				return true
			}
		}
		return false
	}
	return differ(old, cur) || differ(cur, old)
}

// reportsFor reads the reports of the nodes that hold a slot or a permit
// in ch, from snap (nodeSnapshot).
func (ctl *Controller) reportsFor(ch *v1.UpdateChannel, snap map[string]*metav1.ObjectMeta) map[string]protocol.Reports {
	out := map[string]protocol.Reports{}
	read := func(node string) {
		m := snap[node]
		if _, done := out[node]; done || m == nil {
			return
		}
		// trust: ops.node.slot-report
		r, err := protocol.ParseReports(m.Annotations[protocol.AnnotationSlotReport])
		if err != nil {
			ctl.log.Warn("ignoring a node's slot report", "node", node, "err", err)
			return
		}
		out[node] = r
	}
	for _, s := range ch.Status.Updating {
		read(s.Node)
	}
	for _, p := range ch.Status.Staging {
		read(p.Node)
	}
	return out
}
