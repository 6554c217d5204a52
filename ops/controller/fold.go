package controller

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/process"
	"slipway.dev/slipway/ops/protocol"
)

// The controller's side of the nodes' reports (report.go): it watches the
// Nodes' metadata, and a node's changed report starts a pass of the fleet
// view, which folds the reports of the nodes holding slots or permits into
// the channel's status (plan.Fold) in the same write as its own decisions.

// reportInformer watches every Node's metadata; a changed report wakes the
// fleet view of every channel.
func (ctl *Controller) reportInformer() (cache.SharedIndexInformer, error) {
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	inf := process.NewInformer(ctl.meta.Resource(gvr), &metav1.PartialObjectMetadata{}, ctl.opts.Resync, func(*metav1.ListOptions) {})
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*metav1.PartialObjectMetadata)
			n, ok2 := cur.(*metav1.PartialObjectMetadata)
			if !ok1 || !ok2 || !ctl.elected.Load() {
				return
			}
			if o.Annotations[protocol.AnnotationSlotReport] != n.Annotations[protocol.AnnotationSlotReport] {
				ctl.enqueueAll()
			}
			if viewsChanged(o.Annotations, n.Annotations) {
				ctl.viewQueue.Add(n.Name) // written by another hand, or removed: write them again
			}
		},
		DeleteFunc: ctl.forgetNode,
	})
	ctl.nodeMeta = inf.GetStore()
	return inf, err
}

// forgetNode drops what the controller remembers of a deleted Node (its
// last view write, its last slot's claim time): kept, they would grow with
// every node the cluster ever had.
func (ctl *Controller) forgetNode(o any) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	m, ok := o.(*metav1.PartialObjectMetadata)
	if !ok {
		return
	}
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
func (ctl *Controller) nodeSnapshot() map[string]*metav1.PartialObjectMetadata {
	out := map[string]*metav1.PartialObjectMetadata{}
	if ctl.nodeMeta == nil {
		return out
	}
	for _, o := range ctl.nodeMeta.List() {
		if m, ok := o.(*metav1.PartialObjectMetadata); ok {
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
func (ctl *Controller) reportsFor(ch *v1.UpdateChannel, snap map[string]*metav1.PartialObjectMetadata) map[string]protocol.Reports {
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
