package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// The node's versions as labels and annotations: published at start, with
// the uncordon after an upgrade, and again whenever the Node lacks them or
// shows others (a Node deleted and registered again comes back bare).

// publishVersions decides what this boot runs (plan.Running), remembers
// it, and labels the node with it and with what the system directory has
// staged beyond it, writing only when the node shows something else.
func (a *Agent) publishVersions(ctx context.Context) error {
	n, err := a.kube.CoreV1().Nodes().Get(ctx, a.opts.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read this agent's node %s (is --node-name right?): %w", a.opts.NodeName, err)
	}
	e, err := a.bootEvidence(n)
	if err != nil {
		return err
	}
	running, why := plan.Running(e)
	a.setKnown(running, e.BootID)
	if err := a.writeBootRecord(e.BootID, running); err != nil {
		a.log.Warn("this boot's record was not written; the Node's stays the only one", "err", err)
	}
	labels, annotations := bootMeta(running, e.Current, e.BootID)
	due := versionsDue(n, labels, annotations)
	if drain.CordonedBy(n.Annotations) == protocol.CordonOwner {
		// Mid-upgrade: the versions go with the uncordon, in one write.
		return nil
	}
	if due {
		a.log.Info("publishing this node's versions", "rootfs", running.Rootfs, "kernel", running.Kernel, "k3s", running.K3s,
			"from", why, "stagedRootfs", plan.Staged(running, e.Current).Rootfs)
		return a.patchNode(ctx, labels, annotations)
	}
	return nil
}

// republish labels the Node again when it lacks or disagrees with the
// versions this agent published (the node informer's handler queues it).
func (a *Agent) republish(ctx context.Context) error {
	v, ok := a.getKnown()
	n := a.ownNode()
	if !ok || n == nil {
		return nil
	}
	labels, annotations := a.versionMeta(v)
	due := versionsDue(n, labels, annotations)
	if !due || a.drainAsked() {
		return nil
	}
	a.log.Info("the node lacks or disagrees with its versions; publishing them again", "rootfs", v.Rootfs)
	return a.patchNode(ctx, labels, annotations)
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

// versionsDue reports whether n needs labels and annotations: it lacks or disagrees with one of them, and it is not
// mid-upgrade (cordoned by slipway, when the versions ride on the
// uncordon).
func versionsDue(n *corev1.Node, labels, annotations map[string]any) bool {
	if sameMeta(n.Labels, labels) && sameMeta(n.Annotations, annotations) {
		return false
	}
	return drain.CordonedBy(n.Annotations) != protocol.CordonOwner
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

// versionMeta is the labels and annotations that publish running v, the boot it
// belongs to, and what the system directory stages beyond it now.
func (a *Agent) versionMeta(v Versions) (labels, annotations map[string]any) {
	current, err := ReadVersions(a.opts.SystemDir)
	if err != nil {
		current = v // unreadable: publish nothing as staged
	}
	a.mu.Lock()
	boot := a.knownBoot
	a.mu.Unlock()
	labels, annotations = bootMeta(v, current, boot)
	if n := a.ownNode(); n != nil && !a.reportsInObject() { // a release staged ahead that now runs is staged no more (writeStatus, once in the NodeUpdate)
		for _, k := range []string{protocol.AnnotationPrestagedVersion, protocol.AnnotationPrestageFailedVersion} {
			// trust: ops.agent.own-versions
			if have, ok := n.Annotations[k]; ok && have == v.Rootfs {
				annotations[k] = nil
			}
		}
	}
	return labels, annotations
}

func (a *Agent) getKnown() (Versions, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.known, a.hasKnown
}

// uncordonAndPublish uncordons the node if slipway cordoned it and labels
// it with versions v (unless nil), in one write when both are due; the
// annotations extra (a slot's report) go in that write, or in one of their
// own when nothing else is due.
func (a *Agent) uncordonAndPublish(ctx context.Context, v *Versions, extra map[string]any) error {
	var labels, annotations map[string]any
	if v != nil {
		labels, annotations = a.versionMeta(*v)
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
	return err
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
