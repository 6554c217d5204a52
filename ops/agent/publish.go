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
)

// The node's versions as labels and annotations: published at start, with
// the uncordon after an upgrade, and again whenever the Node lacks them or
// shows others (a Node deleted and registered again comes back bare).

// publishVersions labels this node with its system directory's versions,
// writing only when they differ from what the node shows, and remembers
// them as the versions this boot runs.
func (a *Agent) publishVersions(ctx context.Context) error {
	v, err := ReadVersions(a.opts.SystemDir)
	if err != nil {
		return err
	}
	n, err := a.kube.CoreV1().Nodes().Get(ctx, a.opts.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read this agent's node %s (is --node-name right?): %w", a.opts.NodeName, err)
	}
	labels, annotations, due := versionsDue(n, v)
	if drain.CordonedBy(n.Annotations) == CordonOwner {
		// Mid-upgrade: the system directory may already hold the next
		// version; the versions go with the uncordon, in one write.
		return nil
	}
	if due && !a.noJobAt(ctx, v.Rootfs) {
		// An upgrade Job swapped the system directory and this agent was
		// restarted before it cordoned: the node still runs what its labels
		// say until it reboots; the versions go with that.
		a.log.Info("the system directory holds an upgrade not booted yet; versions published after the reboot", "staged", v.Rootfs)
		if shown := (Versions{Rootfs: n.Annotations[AnnotationRootfsVersion], Kernel: n.Annotations[AnnotationKernelVersion],
			K3s: n.Annotations[AnnotationK3sVersion]}); shown.Rootfs != "" {
			a.setKnown(shown) // what it runs, to publish again should the Node lose it
		}
		return nil
	}
	if due {
		a.log.Info("publishing this node's versions", "rootfs", v.Rootfs, "kernel", v.Kernel, "k3s", v.K3s)
		if err := a.patchNode(ctx, labels, annotations); err != nil {
			return err
		}
	}
	a.setKnown(v)
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
	labels, annotations, due := versionsDue(n, v)
	if !due {
		return nil
	}
	a.log.Info("the node lacks its versions (registered again?); publishing them again", "rootfs", v.Rootfs)
	return a.patchNode(ctx, labels, annotations)
}

// versionsDue returns the labels and annotations that publish v on n, and
// whether n needs them: it lacks or disagrees with one of them, and it is
// not mid-upgrade (cordoned by slipway, when the versions ride on the
// uncordon).
func versionsDue(n *corev1.Node, v Versions) (labels, annotations map[string]any, due bool) {
	labels, annotations = nodeMeta(v)
	if sameMeta(n.Labels, labels) && sameMeta(n.Annotations, annotations) {
		return labels, annotations, false
	}
	return labels, annotations, drain.CordonedBy(n.Annotations) != CordonOwner
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

func (a *Agent) setKnown(v Versions) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.known, a.hasKnown = v, true
}

func (a *Agent) getKnown() (Versions, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.known, a.hasKnown
}

// uncordonAndPublish uncordons the node if slipway cordoned it and labels
// it with versions v (unless nil), in one write when both are due.
func (a *Agent) uncordonAndPublish(ctx context.Context, v *Versions) error {
	var labels, annotations map[string]any
	if v != nil {
		labels, annotations = nodeMeta(*v)
	}
	n := a.ownNode()
	published := v == nil || n != nil && sameMeta(n.Labels, labels) && sameMeta(n.Annotations, annotations)
	if published {
		labels, annotations = nil, nil
	}
	also := map[string]any{AnnotationDrainStarted: nil} // the drain's record goes with the cordon
	maps.Copy(also, annotations)
	uncordoned, err := drain.Uncordon(ctx, a.kube, a.opts.NodeName, CordonOwner, drain.Meta{Labels: labels, Annotations: also})
	if err == nil && !uncordoned && !published {
		err = a.patchNode(ctx, labels, annotations)
	}
	if err == nil && v != nil {
		a.setKnown(*v)
	}
	return err
}

// readableVersions reads the system directory's versions; nil when it
// cannot (then nothing is published).
func (a *Agent) readableVersions() *Versions {
	v, err := ReadVersions(a.opts.SystemDir)
	if err != nil {
		a.log.Warn("cannot read this node's versions", "err", err)
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
