package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/process"
	"slipway.dev/slipway/ops/protocol"
)

// The node's own NodeUpdate (protocol.NodeUpdateName): its instructions in
// the spec, written by the controller, its reports in the status, written
// by this agent; only this agent and the controller watch it, where every
// watcher of Nodes receives every Node write. The controller creates it;
// this agent then announces in its status that it reads and reports there
// (status.protocol), carrying over the reports and the reboot-from record
// it kept on its Node. From then on it reports there only, and reads its
// views there once the controller wrote them there (spec.protocol); until
// then, and while no NodeUpdate exists (a controller of the previous
// release), it reads the views on its Node.

// nodeUpdateInformer watches this agent's own NodeUpdate only.
func (a *Agent) nodeUpdateInformer() cache.SharedIndexInformer {
	return process.NewInformerWatching(a.ops.NodeUpdates(a.opts.Namespace), &v1.NodeUpdate{}, a.opts.Resync, process.AgentWatch, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", protocol.NodeUpdateName(a.opts.NodeName)).String()
	})
}

// ownObject is this node's NodeUpdate as the informer has it (nil: none).
func (a *Agent) ownObject() *v1.NodeUpdate {
	return protocol.NodeUpdateIn(a.objects, a.opts.Namespace, a.opts.NodeName)
}

// viewsInObject tells whether the controller writes this node's views in
// its NodeUpdate u (and no longer on its Node).
func viewsInObject(u *v1.NodeUpdate) bool {
	// trust: ops.agent.own-nodeupdate
	return u != nil && u.Spec.Protocol >= protocol.NodeUpdateProtocol
}

// reportsInObject tells whether this agent reports in its NodeUpdate: it
// announced so (this process, or an earlier one on this node).
func (a *Agent) reportsInObject() bool {
	a.mu.Lock()
	announced := a.announced != ""
	a.mu.Unlock()
	u := a.ownObject()
	// trust: ops.agent.own-nodeupdate
	return announced || u != nil && u.Status.Protocol >= protocol.NodeUpdateProtocol
}

// objectViewsGone is viewsGone for the views in the NodeUpdate.
func (a *Agent) objectViewsGone(old, cur any) {
	o, ok1 := old.(*v1.NodeUpdate)
	n, ok2 := cur.(*v1.NodeUpdate)
	if !ok1 || !ok2 || !viewsInObject(o) || !viewsInObject(n) {
		return // views moving between the Node and the NodeUpdate are not gone
	}
	now := protocol.ViewsOfSpec(n.Spec, a.opts.Namespace)
	for uid, v := range protocol.ViewsOfSpec(o.Spec, a.opts.Namespace) {
		if _, still := now[uid]; !still {
			a.forgetSlot(uid)
			a.queue.Add(key{roleNode, v.Name})
		}
	}
}

// announce writes this agent's protocol into its NodeUpdate's status, with
// the reports, the reboot-from record and the prestage marks it kept so
// far, once the controller created the object (and again in one created
// anew, after its Node was deleted and registered again); nothing while
// there is none.
func (a *Agent) announce(ctx context.Context) error {
	a.reporting.Lock()
	defer a.reporting.Unlock()
	u := a.ownObject()
	if u == nil {
		return nil
	}
	if a.announcedIn(u) {
		// Announced there (a NodeUpdate created again, with its Node, is
		// announced in again); what an earlier process stopped before
		// removing from the Node is removed now.
		a.dropMovedFromNode(ctx)
		return nil
	}
	ready, release := a.holdWork() // the Node read below (its watch is closed while idle)
	if !ready {
		return nil // their first fill queues the announce again
	}
	defer release()
	fields := map[string]any{}
	n := a.ownNode()
	if n != nil {
		if rf := a.rebootFromOf(n); rf != "" {
			fields["rebootFrom"] = rf
		}
	}
	staged, failed := a.prestageMarks()
	fields["prestagedVersion"], fields["prestageFailedVersion"] = nilIfEmpty(staged), nilIfEmpty(failed)
	if a.opts.Protocol >= protocol.VersionsProtocol && n != nil {
		fields["staged"] = stagedOnNode(n.Annotations) // as published there: the status now keeps it
	}
	if err := a.writeStatus(ctx, a.reportsNow(), fields); err != nil {
		return err
	}
	a.mu.Lock()
	a.announced = u.UID
	a.mu.Unlock()
	a.dropMovedFromNode(ctx)
	a.log.Info("reporting in this node's NodeUpdate from now on", "protocol", a.opts.Protocol)
	return nil
}

// protocolMoved opens the work watches when the protocol the controller
// reads this node in (its NodeUpdate's spec.protocol) changed between old
// and cur: where the versions belong changes with it (publish.go), and a
// Node settled under the old one is not under the new. While they are
// closed the publish reads no Node and does nothing; once filled they
// queue it, and they close again only on a Node settled anew.
func (a *Agent) protocolMoved(old, cur any) {
	o, ok1 := old.(*v1.NodeUpdate)
	n, ok2 := cur.(*v1.NodeUpdate)
	// trust: ops.agent.own-nodeupdate
	if !ok1 || !ok2 || o.Spec.Protocol == n.Spec.Protocol {
		return
	}
	a.needWork()
}

// stagedOnNode is the staged versions a Node's annotations publish, as the
// status's staged field (nil: none).
func stagedOnNode(annotations map[string]string) *v1.NodeVersions {
	// trust: ops.agent.own-versions
	s := v1.NodeVersions{Rootfs: annotations[protocol.AnnotationStagedRootfsVersion], Kernel: annotations[protocol.AnnotationStagedKernelVersion],
		K3s: annotations[protocol.AnnotationStagedK3sVersion]}
	if s == (v1.NodeVersions{}) {
		return nil
	}
	return &s
}

// announcedIn reports whether this agent's protocol is announced in its
// NodeUpdate u: by this process, or already there (an earlier process's).
func (a *Agent) announcedIn(u *v1.NodeUpdate) bool {
	a.mu.Lock()
	done := a.announced == u.UID
	a.mu.Unlock()
	// trust: ops.agent.own-nodeupdate
	return done || u.Status.Protocol >= a.opts.Protocol
}

// dropMovedFromNode removes from the Node what moved to the NodeUpdate
// (protocol.MovedToNodeUpdate)
// (every watcher of Nodes received it): nothing reads it there any more.
// It writes only when the Node still carries some of it, so a process
// stopped between the announcement and this removal, or a failed patch,
// is mended at the next announce.
func (a *Agent) dropMovedFromNode(ctx context.Context) {
	moved := map[string]any{}
	if n := a.ownNode(); n != nil {
		for _, k := range protocol.MovedToNodeUpdate {
			if _, ok := n.Annotations[k]; ok {
				moved[k] = nil
			}
		}
	}
	if len(moved) == 0 {
		return
	}
	if err := a.patchNode(ctx, nil, moved); err != nil {
		a.log.Warn("could not remove what moved to the NodeUpdate from the Node; left there, unread, tried again later", "err", err)
	}
}

// statusFields are the Node annotations this agent writes into its
// NodeUpdate's status instead, once it reports there, by status field.
var statusFields = map[string]string{
	protocol.AnnotationRebootFrom:            "rebootFrom",
	protocol.AnnotationPrestagedVersion:      "prestagedVersion",
	protocol.AnnotationPrestageFailedVersion: "prestageFailedVersion",
}

// splitStatus splits what a report write puts beside the report: the
// annotations the status holds (statusFields) go there, the rest onto the
// Node.
func splitStatus(extra map[string]any) (node, status map[string]any) {
	node, status = map[string]any{}, map[string]any{}
	for k, v := range extra {
		if f, ok := statusFields[k]; ok {
			status[f] = v
		} else {
			node[k] = v
		}
	}
	return node, status
}

// writeStatus writes this node's reports into its NodeUpdate's status, with
// the fields set (statusFields' values, the staged versions; nil removes),
// the versions its boot runs, and the protocol it speaks. A release staged
// ahead that now runs is staged no more.
func (a *Agent) writeStatus(ctx context.Context, reports protocol.Reports, fields map[string]any) error {
	st := map[string]any{"protocol": a.opts.Protocol, "reports": reports.StatusReports()}
	maps.Copy(st, fields)
	if v := a.readableVersions(); v != nil {
		a.mu.Lock()
		boot := a.knownBoot
		a.mu.Unlock()
		st["booted"] = v1.NodeVersions{Rootfs: v.Rootfs, Kernel: v.Kernel, K3s: v.K3s, BootID: boot}
		staged, failed := a.prestageMarks()
		for f, have := range map[string]string{"prestagedVersion": staged, "prestageFailedVersion": failed} {
			if _, set := st[f]; !set && have != "" && have == v.Rootfs {
				st[f] = nil
			}
		}
	}
	if err := a.patchStatus(ctx, st); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, f := range []string{"prestagedVersion", "prestageFailedVersion"} {
		if v, set := st[f]; set {
			s, _ := v.(string)
			a.marks[f] = s
		}
	}
	return nil
}

// patchStatus merge-patches the fields st into this node's NodeUpdate's
// status, and remembers the versions written (statusDue).
func (a *Agent) patchStatus(ctx context.Context, st map[string]any) error {
	data, err := json.Marshal(map[string]any{"status": st})
	if err != nil {
		return err
	}
	written, err := a.ops.NodeUpdates(a.opts.Namespace).Patch(ctx, protocol.NodeUpdateName(a.opts.NodeName), types.MergePatchType, data, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("report in the NodeUpdate of node %s: %w", a.opts.NodeName, err)
	}
	if _, ok := st["staged"]; ok && written.Status.Booted != nil {
		a.mu.Lock()
		a.wroteVersions = statusWritten{uid: written.UID, status: v1.NodeUpdateStatus{Booted: written.Status.Booted, Staged: written.Status.Staged}}
		a.mu.Unlock()
	}
	return nil
}

// statusWritten is the versions this process last wrote into the status
// of its NodeUpdate of UID uid.
type statusWritten struct {
	uid    types.UID
	status v1.NodeUpdateStatus
}

// objectFromServer is this node's NodeUpdate at the API server (nil: none,
// or an agent that reads none).
func (a *Agent) objectFromServer(ctx context.Context) (*v1.NodeUpdate, error) {
	if a.opts.NodeOnly {
		return nil, nil
	}
	u, err := a.ops.NodeUpdates(a.opts.Namespace).Get(ctx, protocol.NodeUpdateName(a.opts.NodeName), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read the NodeUpdate of node %s: %w", a.opts.NodeName, err)
	}
	return u, nil
}

// prestageMarks are the prestaged and prestage-failed versions this node
// published: in its NodeUpdate's status once it reports there (this
// process's last write, or the cache's), else on its Node.
func (a *Agent) prestageMarks() (staged, failed string) {
	if a.reportsInObject() {
		a.mu.Lock()
		s, sok := a.marks["prestagedVersion"]
		f, fok := a.marks["prestageFailedVersion"]
		a.mu.Unlock()
		if u := a.ownObject(); u != nil {
			// trust: ops.agent.own-nodeupdate
			if !sok {
				s = u.Status.PrestagedVersion
			}
			if !fok {
				f = u.Status.PrestageFailedVersion
			}
		}
		return s, f
	}
	n := a.ownNode()
	if n == nil {
		return "", ""
	}
	// trust: ops.agent.own-versions
	return n.Annotations[protocol.AnnotationPrestagedVersion], n.Annotations[protocol.AnnotationPrestageFailedVersion]
}

// publishMarks writes the prestage marks (annotations: statusFields' keys)
// where this node reports, without a report.
func (a *Agent) publishMarks(ctx context.Context, marks map[string]any) error {
	a.reporting.Lock()
	defer a.reporting.Unlock()
	if !a.reportsInObject() {
		return a.patchNode(ctx, nil, marks)
	}
	_, fields := splitStatus(marks)
	return a.writeStatus(ctx, a.reportsNow(), fields)
}

// objectViewsFromServer reads this node's views from its NodeUpdate at the
// API server; ok false when the controller does not write them there.
func (a *Agent) objectViewsFromServer(ctx context.Context) (map[types.UID]protocol.View, bool, error) {
	u, err := a.objectFromServer(ctx)
	if err != nil || !viewsInObject(u) {
		return nil, false, err
	}
	return protocol.ViewsOfSpec(u.Spec, a.opts.Namespace), true, nil
}
