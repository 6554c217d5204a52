package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// The node's versions: what its boot runs (with the boot ID they were
// recorded in) and what its system directory stages beyond it. Published
// at start, with the uncordon after an upgrade, and again whenever the
// Node or the NodeUpdate lacks them or shows others (a Node deleted and
// registered again comes back bare). Where they go depends on who reads
// them (versionsWhere): the Node always carries the version labels users
// select on; the raw versions, the boot ID and the staged versions go in
// the NodeUpdate's status once this agent speaks protocol 3 there, and
// leave the Node once the controller reads them there too.

// versionsOut is what publishes a node's versions: on its Node (labels and
// annotations; nil values remove keys), and in its NodeUpdate's status
// (the booted and staged fields; nil when it keeps none there).
type versionsOut struct {
	labels, annotations map[string]any
	status              map[string]any
}

// shownOn tells whether Node n shows o's labels and annotations (nil
// values: absent there).
func (o versionsOut) shownOn(n *corev1.Node) bool {
	return sameMeta(n.Labels, o.labels) && sameMeta(n.Annotations, o.annotations)
}

// versionsFor is what publishes running (recorded in boot) and what current
// stages beyond it: inStatus, also in the NodeUpdate's status; onlyStatus,
// there alone, the Node keeping the version labels only.
func versionsFor(running, current Versions, boot string, inStatus, onlyStatus bool) versionsOut {
	labels, annotations := bootMeta(running, current, boot)
	out := versionsOut{labels: labels, annotations: annotations}
	if inStatus {
		out.status = statusVersions(running, current, boot)
	}
	if inStatus && onlyStatus {
		for k := range out.annotations {
			out.annotations[k] = nil // the raw versions, the boot ID, the staged versions: in the status alone
		}
		out.labels[protocol.LabelStagedRootfsVersion] = nil
	}
	return out
}

// statusVersions are the NodeUpdate status fields that publish running
// (recorded in boot) and what current stages beyond it.
func statusVersions(running, current Versions, boot string) map[string]any {
	st := map[string]any{"booted": v1.NodeVersions{Rootfs: running.Rootfs, Kernel: running.Kernel, K3s: running.K3s, BootID: boot}, "staged": nil}
	if s := plan.Staged(running, current); s != (Versions{}) {
		st["staged"] = &v1.NodeVersions{Rootfs: s.Rootfs, Kernel: s.Kernel, K3s: s.K3s}
	}
	return st
}

// sameStatus tells whether status st shows the booted and staged fields of want (statusVersions).
func sameStatus(st v1.NodeUpdateStatus, want map[string]any) bool {
	b, _ := want["booted"].(v1.NodeVersions)
	s, _ := want["staged"].(*v1.NodeVersions)
	return st.Booted != nil && *st.Booted == b && (st.Staged == nil) == (s == nil) && (s == nil || *st.Staged == *s)
}

// versionsWhere tells where this agent keeps its node's versions, given its
// NodeUpdate u: in its status too (it speaks protocol 3 and announced it
// there), and there alone (the controller reads them there: spec.protocol 3).
func (a *Agent) versionsWhere(u *v1.NodeUpdate) (inStatus, onlyStatus bool) {
	if a.opts.Protocol < protocol.VersionsProtocol || u == nil {
		return false, false
	}
	a.mu.Lock()
	announced := a.announced == u.UID
	a.mu.Unlock()
	// trust: ops.agent.own-nodeupdate
	inStatus = announced || protocol.VersionsInStatus(u)
	return inStatus, inStatus && u.Spec.Protocol >= protocol.VersionsProtocol
}

// publishVersions decides what this boot runs (plan.Running), remembers
// it, and publishes it and what the system directory has staged beyond it,
// writing only where the node shows something else. It reads its Node and
// NodeUpdate side by side (start.go).
func (a *Agent) publishVersions(ctx context.Context) error {
	r := a.readOwn(ctx)
	if r.err != nil {
		return r.err
	}
	n, u := r.node, r.object
	e, err := a.bootEvidence(n, u)
	if err != nil {
		return err
	}
	running, why := plan.Running(e)
	a.setKnown(running, e.BootID)
	if err := a.writeBootRecord(e.BootID, running); err != nil {
		a.log.Warn("this boot's record was not written; the Node's stays the only one", "err", err)
	}
	inStatus, onlyStatus := a.versionsWhere(u)
	out := versionsFor(running, e.Current, e.BootID, inStatus, onlyStatus)
	if drain.CordonedBy(n.Annotations) == protocol.CordonOwner {
		// Mid-upgrade: the versions go with the uncordon, in one write.
		return nil
	}
	nodeDue := !out.shownOn(n)
	statusDue := out.status != nil && !sameStatus(u.Status, out.status)
	if nodeDue || statusDue {
		a.log.Info("publishing this node's versions", "rootfs", running.Rootfs, "kernel", running.Kernel, "k3s", running.K3s,
			"from", why, "stagedRootfs", plan.Staged(running, e.Current).Rootfs, "inNodeUpdate", inStatus, "onNode", !onlyStatus)
	}
	if nodeDue {
		if err := a.patchNode(ctx, out.labels, out.annotations); err != nil {
			return err
		}
	}
	if statusDue {
		return a.patchStatus(ctx, out.status)
	}
	return nil
}

// republish publishes the versions again where the Node or the NodeUpdate
// lacks or disagrees with them (the informers' handlers queue it).
func (a *Agent) republish(ctx context.Context) error {
	v, ok := a.getKnown()
	n := a.ownNode()
	if !ok || n == nil || drain.CordonedBy(n.Annotations) == protocol.CordonOwner || a.drainAsked() {
		return nil // mid-upgrade: the versions ride on the slot's writes
	}
	out := a.versionsNow(v)
	if !out.shownOn(n) {
		a.log.Info("the node lacks or disagrees with its versions; publishing them again", "rootfs", v.Rootfs)
		if err := a.patchNode(ctx, out.labels, out.annotations); err != nil {
			return err
		}
	}
	// Asked again with the reporting lock held: a drain request in flight
	// when the check above ran notes itself before it lets the lock go.
	return a.writeVersionsUnless(ctx, a.drainAsked)
}

// drainAsked reports whether this process asked for its node's drain for
// a slot it still holds: mid-upgrade, as when slipway's cordon is on (which
// follows in a moment), the versions ride on the slot's end write, and an
// activation's swap seen before the cordon is published only when the drain
// is slow (stepPublishSwap), not on the next change of the Node.
func (a *Agent) drainAsked() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range a.wrote {
		if s.Phase == plan.PhaseDraining {
			return true
		}
	}
	return false
}

func sameMeta(have map[string]string, want map[string]any) bool {
	for k, w := range want {
		h, ok := have[k]
		if w == nil && ok || w != nil && h != w {
			return false
		}
	}
	return true
}

// setKnown remembers what this boot runs, decided at start.
func (a *Agent) setKnown(v Versions, bootID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.known, a.hasKnown, a.knownBoot = v, true, bootID
}

// versionsNow is what publishes running v, the boot it belongs to, and what
// the system directory stages beyond it now, where this agent keeps them
// (versionsWhere, from its NodeUpdate as the cache has it).
func (a *Agent) versionsNow(v Versions) versionsOut {
	current, err := ReadVersions(a.opts.SystemDir)
	if err != nil {
		current = v // unreadable: publish nothing as staged
	}
	a.mu.Lock()
	boot := a.knownBoot
	a.mu.Unlock()
	inStatus, onlyStatus := a.versionsWhere(a.ownObject())
	out := versionsFor(v, current, boot, inStatus, onlyStatus)
	if n := a.ownNode(); n != nil && !a.reportsInObject() { // a release staged ahead that now runs is staged no more (writeStatus, once in the NodeUpdate)
		for _, k := range []string{protocol.AnnotationPrestagedVersion, protocol.AnnotationPrestageFailedVersion} {
			// trust: ops.agent.own-versions
			if have, ok := n.Annotations[k]; ok && have == v.Rootfs {
				out.annotations[k] = nil
			}
		}
	}
	return out
}

// publishDue tells whether out is not what the Node n and the NodeUpdate show.
func (a *Agent) publishDue(n *corev1.Node, out versionsOut) bool {
	return !out.shownOn(n) || a.statusDue(out.status)
}

// statusDue tells whether the NodeUpdate's status lacks or disagrees with
// the versions st (statusVersions; nil: none kept there): neither the cache
// nor this process's last write for the same object shows them.
func (a *Agent) statusDue(st map[string]any) bool {
	if st == nil {
		return false
	}
	u := a.ownObject()
	if u == nil {
		return false // none yet: the announcement in the one created carries them
	}
	// trust: ops.agent.own-nodeupdate
	if sameStatus(u.Status, st) {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.wroteVersions.uid != u.UID || !sameStatus(a.wroteVersions.status, st)
}

// writeVersions writes the versions into the NodeUpdate's status when it
// keeps them and lacks or disagrees with them.
func (a *Agent) writeVersions(ctx context.Context) error {
	return a.writeVersionsUnless(ctx, nil)
}

// writeVersionsUnless is writeVersions unless skip (when not nil) says
// otherwise with the reporting lock held, after the report writes before
// it.
func (a *Agent) writeVersionsUnless(ctx context.Context, skip func() bool) error {
	v, ok := a.getKnown()
	if !ok {
		return nil
	}
	a.reporting.Lock()
	defer a.reporting.Unlock()
	if skip != nil && skip() {
		return nil
	}
	out := a.versionsNow(v)
	if !a.statusDue(out.status) {
		return nil
	}
	return a.patchStatus(ctx, out.status)
}

func (a *Agent) getKnown() (Versions, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.known, a.hasKnown
}

// uncordonAndPublish uncordons the node if slipway cordoned it and
// publishes versions v on it (unless nil), in one write when both are due;
// the annotations extra (a slot's report) go in that write, or in one of
// their own when nothing else is due. What the NodeUpdate's status keeps
// of v is returned, for the caller's status write (nil: nothing).
func (a *Agent) uncordonAndPublish(ctx context.Context, v *Versions, extra map[string]any) (map[string]any, error) {
	var labels, annotations, status map[string]any
	if v != nil {
		out := a.versionsNow(*v)
		labels, annotations, status = out.labels, out.annotations, out.status
	}
	n := a.ownNode()
	published := v == nil || n != nil && sameMeta(n.Labels, labels) && sameMeta(n.Annotations, annotations)
	if published {
		labels, annotations = nil, nil
	}
	also := map[string]any{protocol.AnnotationDrainStarted: nil, protocol.AnnotationCordonedFor: nil} // the drain's record goes with the cordon
	maps.Copy(also, annotations)
	maps.Copy(also, extra)
	// From the cache's copy of the Node: the write is conditional on it, and
	// a stale copy costs a conflict and a read, a fresh one saves the read.
	written, err := drain.UncordonSeen(ctx, a.kube, a.opts.NodeName, n, protocol.CordonOwner, drain.Meta{Labels: labels, Annotations: also})
	uncordoned := written != nil
	if err == nil && !uncordoned && (!published || len(extra) > 0) {
		write := map[string]any{}
		maps.Copy(write, annotations)
		maps.Copy(write, extra)
		err = a.patchNode(ctx, labels, write)
	}
	return status, err
}

// readableVersions is what this boot runs, as decided at start; nil when
// not known (then nothing is published).
func (a *Agent) readableVersions() *Versions {
	v, ok := a.getKnown()
	if !ok {
		return nil
	}
	return &v
}

// patchNode merge-patches this agent's Node's labels and annotations (nil values remove keys).
func (a *Agent) patchNode(ctx context.Context, labels, annotations map[string]any) error {
	md := map[string]any{}
	if len(labels) > 0 {
		md["labels"] = labels
	}
	if len(annotations) > 0 {
		md["annotations"] = annotations
	}
	data, err := json.Marshal(map[string]any{"metadata": md})
	if err != nil {
		return err
	}
	if _, err := a.kube.CoreV1().Nodes().Patch(ctx, a.opts.NodeName, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("update node %s: %w", a.opts.NodeName, err)
	}
	return nil
}
