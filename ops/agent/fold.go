package agent

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"slipway.dev/slipway/ops/agent/plan"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// The controller's side of the nodes' reports (report.go): it watches the
// Nodes' metadata, and a node's changed report starts a pass of the fleet
// view, which folds the reports of the nodes holding slots or permits into
// the channel's status (plan.Fold) in the same write as its own decisions.

// reportInformer watches every Node's metadata; a changed report wakes the
// fleet view of every channel.
func (a *Agent) reportInformer() (cache.SharedIndexInformer, error) {
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	inf := newInformer(a.meta.Resource(gvr), &metav1.PartialObjectMetadata{}, a.opts.Resync, func(*metav1.ListOptions) {})
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*metav1.PartialObjectMetadata)
			n, ok2 := cur.(*metav1.PartialObjectMetadata)
			if !ok1 || !ok2 || !a.elected.Load() {
				return
			}
			if o.Annotations[AnnotationSlotReport] != n.Annotations[AnnotationSlotReport] {
				a.enqueueAll(roleFleet)
			}
			if viewsChanged(o.Annotations, n.Annotations) {
				a.viewQueue.Add(n.Name) // written by another hand, or removed: write them again
			}
		},
	})
	a.nodeMeta = inf.GetStore()
	return inf, err
}

// viewsChanged reports whether a Node's view annotations changed.
func viewsChanged(old, cur map[string]string) bool {
	differ := func(x, y map[string]string) bool {
		for k, v := range x {
			if w, ok := y[k]; strings.HasPrefix(k, AnnotationChannelViewPrefix) && (!ok || w != v) {
				return true
			}
		}
		return false
	}
	return differ(old, cur) || differ(cur, old)
}

// reportsFor reads the reports of the nodes that hold a slot or a permit in ch.
func (a *Agent) reportsFor(ch *v1.UpdateChannel) map[string]plan.Reports {
	out := map[string]plan.Reports{}
	read := func(node string) {
		if _, done := out[node]; done || a.nodeMeta == nil {
			return
		}
		o, ok, _ := a.nodeMeta.GetByKey(node)
		if !ok {
			return
		}
		m, _ := o.(*metav1.PartialObjectMetadata)
		if m == nil {
			return
		}
		r, err := plan.ParseReports(m.Annotations[AnnotationSlotReport])
		if err != nil {
			a.log.Warn("ignoring a node's slot report", "node", node, "err", err)
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
