package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/process"
	"slipway.dev/slipway/ops/protocol"
)

// The per-node NodeUpdate (protocol.NodeUpdateName): what only one node's
// agent and the controller need, off the Node. The controller creates one
// per node, and writes each node's views there once its agent announced
// that it reads them there (status.protocol); it then marks the spec
// (spec.protocol) and removes the node's views from its Node once the node
// holds no slot or permit. For a node whose agent has not announced it
// (an agent of the previous release) the views stay on its Node, and its
// reports are read there. A node's reports and the versions they end a
// slot with are read from where its agent writes them: the NodeUpdate's
// status once it announced, its Node before.

// nodeUpdateInformer watches the namespace's NodeUpdates: a changed status
// (a report, an announcement) wakes the fleet view of every channel and
// the node's views; a spec written by another hand is written again.
func (ctl *Controller) nodeUpdateInformer() (cache.SharedIndexInformer, error) {
	inf := process.NewInformer(ctl.ops.NodeUpdates(ctl.opts.Namespace), &v1.NodeUpdate{}, ctl.opts.Resync, func(*metav1.ListOptions) {})
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*v1.NodeUpdate)
			n, ok2 := cur.(*v1.NodeUpdate)
			if !ok1 || !ok2 || !ctl.elected.Load() {
				return
			}
			if o.Status.Protocol != n.Status.Protocol {
				ctl.viewQueue.Add(n.Name) // its views move to the object
			}
			if !reflect.DeepEqual(o.Status, n.Status) {
				ctl.enqueueAll()
				if agentReadsObject(n) && ctl.nodeHoldsViews(n.Name) {
					ctl.viewQueue.Add(n.Name) // its slot may have ended: the views left on its Node go
				}
			}
			if !reflect.DeepEqual(o.Spec, n.Spec) && !ctl.wroteSpec(n) {
				ctl.viewQueue.Add(n.Name)
			}
		},
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if n, ok := o.(*v1.NodeUpdate); ok && ctl.elected.Load() {
				ctl.viewQueue.Add(n.Name) // created again while its Node is there
			}
		},
	})
	ctl.nodeUpdates = inf.GetStore()
	return inf, err
}

// nodeUpdateOf is node's NodeUpdate as the cache has it (nil: none).
func (ctl *Controller) nodeUpdateOf(node string) *v1.NodeUpdate {
	return protocol.NodeUpdateIn(ctl.nodeUpdates, ctl.opts.Namespace, node)
}

// agentReadsObject tells whether the agent of the node of NodeUpdate u
// announced that it reads its instructions there and reports there.
func agentReadsObject(u *v1.NodeUpdate) bool {
	// trust: ops.nodeupdate.protocol
	return u != nil && u.Status.Protocol >= protocol.NodeUpdateProtocol
}

// versionsInStatus tells whether the controller reads the versions of the
// node of NodeUpdate u from its status alone: its agent keeps them current
// there (protocol 3), and this controller speaks that protocol.
func (ctl *Controller) versionsInStatus(u *v1.NodeUpdate) bool {
	// trust: ops.nodeupdate.protocol
	return ctl.opts.Protocol >= protocol.VersionsProtocol && protocol.VersionsInStatus(u)
}

// objectWritten is what the controller last wrote of a NodeUpdate's spec,
// and the object's resource version after the write.
type objectWritten struct {
	rv   string
	spec v1.NodeUpdateSpec
}

// specSeen is u's spec, or this process's last write of it while the cache
// does not show that write yet.
func (ctl *Controller) specSeen(u *v1.NodeUpdate) v1.NodeUpdateSpec {
	spec, _ := ctl.specSeenAt(u)
	return spec
}

// specSeenAt is specSeen and the resource version it is of: u's, or the
// write's.
func (ctl *Controller) specSeenAt(u *v1.NodeUpdate) (v1.NodeUpdateSpec, string) {
	ctl.mu.Lock()
	w, ok := ctl.objectWrites[u.Name]
	ctl.mu.Unlock()
	if ok && olderThan(u.ResourceVersion, w.rv) {
		return w.spec, w.rv
	}
	return u.Spec, u.ResourceVersion
}

// wroteSpec tells whether u shows the spec this process last wrote.
func (ctl *Controller) wroteSpec(u *v1.NodeUpdate) bool {
	ctl.mu.Lock()
	w, ok := ctl.objectWrites[u.Name]
	ctl.mu.Unlock()
	return ok && (w.rv == u.ResourceVersion || olderThan(u.ResourceVersion, w.rv))
}

// objectViews are the views and the reports of the node of NodeUpdate u as
// the annotations of a Node would hold them (protocol.ViewKey, the slot
// report), so that the view writes compare them alike (views.go). They
// are encoded once per change of u or of the spec written (viewmemo.go);
// the map is shared, not to be changed.
func (ctl *Controller) objectViews(u *v1.NodeUpdate) map[string]string {
	spec, specRV := ctl.specSeenAt(u)
	return ctl.memo.objectViews(u.Name, u.ResourceVersion, specRV, func() map[string]string {
		out := map[string]string{}
		for uid, v := range protocol.ViewsOfSpec(spec, ctl.opts.Namespace) {
			// trust: ops.nodeupdate.spec
			out[protocol.ViewKey(uid)] = v.String()
		}
		// trust: ops.nodeupdate.reports
		out[protocol.AnnotationSlotReport] = protocol.ReportsOfStatus(u.Status).String()
		return out
	})
}

// holdsView tells whether the node of Node metadata m holds the view key
// where its agent reads its views (its NodeUpdate, or its Node).
func (ctl *Controller) holdsView(m *metav1.ObjectMeta, key string) bool {
	u := ctl.nodeUpdateOf(m.Name)
	if !agentReadsObject(u) {
		_, has := m.Annotations[key]
		return has
	}
	uid := types.UID(strings.TrimPrefix(key, protocol.AnnotationChannelViewPrefix))
	for _, c := range ctl.specSeen(u).Channels {
		if c.UID == uid {
			return true
		}
	}
	return false
}

// writeObjectViews writes node's views into its NodeUpdate u (its agent
// reads them there): have are those it holds (objectViews), patch what
// changes (nil: removed). Once the node holds no slot or permit in them,
// the views left on its Node by an agent of the previous release go.
func (ctl *Controller) writeObjectViews(ctx context.Context, node string, u *v1.NodeUpdate, have map[string]string, patch map[string]any) error {
	views := map[types.UID]protocol.View{}
	for k, val := range have {
		if uid, ok := strings.CutPrefix(k, protocol.AnnotationChannelViewPrefix); ok {
			if v, err := protocol.ParseView(val); err == nil {
				views[types.UID(uid)] = v
			}
		}
	}
	for k, val := range patch {
		uid := types.UID(strings.TrimPrefix(k, protocol.AnnotationChannelViewPrefix))
		s, ok := val.(string)
		if !ok {
			delete(views, uid)
			continue
		}
		v, err := protocol.ParseView(s)
		if err != nil {
			return fmt.Errorf("the view of node %s is not one: %w", node, err) // the controller's own: cannot happen
		}
		views[uid] = v
	}
	spec := protocol.SpecOf(views)
	// trust: ops.nodeupdate.protocol
	spec.Protocol = protocol.SpecProtocol(u.Status.Protocol, ctl.opts.Protocol)
	if len(patch) > 0 || ctl.specSeen(u).Protocol != spec.Protocol {
		// A merge patch of the whole spec (its only writer), not an update:
		// the agent's status writes move the resource version on.
		channels := spec.Channels
		if channels == nil {
			channels = []v1.NodeChannel{} // written out: a merge patch keeps what it leaves out
		}
		data, err := json.Marshal(map[string]any{"spec": map[string]any{"protocol": spec.Protocol, "channels": channels}})
		if err != nil {
			return err
		}
		written, err := ctl.ops.NodeUpdates(ctl.opts.Namespace).Patch(ctx, u.Name, types.MergePatchType, data, metav1.PatchOptions{})
		if apierrors.IsNotFound(err) {
			return nil // its Node is gone (the garbage collector deleted it), or it comes back created
		} else if err != nil {
			return fmt.Errorf("write the instructions of node %s: %w", node, err)
		}
		ctl.mu.Lock()
		ctl.objectWrites[node] = objectWritten{rv: written.ResourceVersion, spec: spec}
		ctl.mu.Unlock()
		ctl.metrics.viewWrites.Inc()
		ctl.revokedViewWritten(node)
	}
	reports, _ := protocol.ParseReports(have[protocol.AnnotationSlotReport])
	return ctl.dropNodeViews(ctx, node, views, reports)
}

// nodeHoldsViews tells whether node's Node holds a channel view.
func (ctl *Controller) nodeHoldsViews(node string) bool {
	m := ctl.nodeMetaOf(node)
	if m == nil {
		return false
	}
	for k := range m.Annotations {
		if strings.HasPrefix(k, protocol.AnnotationChannelViewPrefix) {
			return true
		}
	}
	return false
}

// dropNodeViews removes the views of this namespace's channels from node's
// Node once its agent reads them from its NodeUpdate and they give it no
// live slot or permit (reports: its reports; an agent that has just
// switched over never sees its slot vanish from both places at once).
func (ctl *Controller) dropNodeViews(ctx context.Context, node string, views map[types.UID]protocol.View, reports protocol.Reports) error {
	for uid, v := range views {
		r := reports[uid]
		permitBack := v.Permit != nil && r.PermitDone != nil && r.PermitDone.Unix() == v.Permit.Since.Unix()
		if plan.SlotLive(v, r) || v.Permit != nil && !permitBack {
			return nil
		}
	}
	m := ctl.nodeMetaOf(node)
	if m == nil {
		return nil
	}
	patch := map[string]any{}
	for uid := range protocol.ViewsOf(m.Annotations, ctl.opts.Namespace, func(key string, _ error) {}) {
		patch[protocol.ViewKey(uid)] = nil
	}
	if len(patch) == 0 {
		return nil
	}
	if err := ctl.patchNodeViews(ctx, node, patch); err != nil {
		return fmt.Errorf("remove the channel views from node %s (its agent reads its NodeUpdate): %w", node, err)
	}
	return nil
}

// ensureNodeUpdate creates node's NodeUpdate when there is none, owned by
// its Node (the garbage collector deletes it with the Node): an agent that
// reads NodeUpdates announces so in its status, and only then are its
// instructions written there.
func (ctl *Controller) ensureNodeUpdate(ctx context.Context, node string, u *v1.NodeUpdate) error {
	m := ctl.nodeMetaOf(node)
	if u != nil || m == nil {
		return nil
	}
	obj := &v1.NodeUpdate{ObjectMeta: metav1.ObjectMeta{Name: protocol.NodeUpdateName(node), Namespace: ctl.opts.Namespace,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: m.UID}}}}
	_, err := ctl.ops.NodeUpdates(ctl.opts.Namespace).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the NodeUpdate of node %s: %w", node, err)
	}
	return nil
}

// withObjectReports lays the reports and booted versions of the nodes
// whose agents report in their NodeUpdate over their Node metadata, so
// that a pass reads a node's report and the versions it ended its slot
// with from the one write that holds both (fleet.go). Each node's is made
// once per change of its Node or its NodeUpdate (viewmemo.go).
func (ctl *Controller) withObjectReports(snap map[string]*metav1.ObjectMeta) {
	for name, m := range snap {
		u := ctl.nodeUpdateOf(name)
		if !agentReadsObject(u) {
			continue
		}
		snap[name] = ctl.memo.withReports(name, m.ResourceVersion, u.ResourceVersion, func() *metav1.ObjectMeta { return ctl.metaWithObjectReports(m, u) })
	}
}

// metaWithObjectReports is the Node metadata m with the reports and
// booted versions of its NodeUpdate u laid over its annotations.
func (ctl *Controller) metaWithObjectReports(m *metav1.ObjectMeta, u *v1.NodeUpdate) *metav1.ObjectMeta {
	c := *m
	c.Annotations = maps.Clone(m.Annotations)
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	// trust: ops.nodeupdate.reports
	c.Annotations[protocol.AnnotationSlotReport] = protocol.ReportsOfStatus(u.Status).String()
	// trust: ops.nodeupdate.versions
	switch b := u.Status.Booted; {
	case ctl.versionsInStatus(u):
		// Kept current there, and only there once spec.protocol says
		// this controller reads them there: the Node's are not read.
		delete(c.Annotations, protocol.AnnotationRootfsVersion)
		if b != nil {
			c.Annotations[protocol.AnnotationRootfsVersion] = b.Rootfs
		}
	case b != nil && b.Rootfs != "":
		// An agent of protocol 2 writes them there with its reports.
		c.Annotations[protocol.AnnotationRootfsVersion] = b.Rootfs
	}
	for k, v := range map[string]string{protocol.AnnotationPrestagedVersion: u.Status.PrestagedVersion, protocol.AnnotationPrestageFailedVersion: u.Status.PrestageFailedVersion} {
		if v == "" {
			delete(c.Annotations, k)
		} else {
			c.Annotations[k] = v
		}
	}
	return &c
}
