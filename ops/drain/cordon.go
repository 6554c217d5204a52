// Package drain takes a node out of service and puts it back: Cordon marks
// it unschedulable and records that slipway did so (and whether the node was
// schedulable before), Drain evicts its pods through the Eviction API so
// PodDisruptionBudgets are honoured, within a timeout, and Uncordon makes it
// schedulable again, idempotently and only when slipway cordoned it. Every
// controller that takes a node down shares it.
package drain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"slipway.dev/slipway/ops/internal/conflict"
	"slipway.dev/slipway/ops/kube"
)

// Annotations written on the Node by Cordon and removed by Uncordon.
const (
	// AnnotationCordonedBy names who cordoned the node (Options.Owner,
	// e.g. "slipway-agent"). Present only while slipway holds the cordon.
	AnnotationCordonedBy = "drain.slipway.dev/cordoned-by"
	// AnnotationSchedulableBefore is "true" when the node was schedulable
	// before slipway cordoned it, "false" when someone else had cordoned it
	// already (then Uncordon leaves it unschedulable).
	AnnotationSchedulableBefore = "drain.slipway.dev/schedulable-before"
)

// ErrCordonedByOther is wrapped by Cordon's error when another of
// slipway's owners holds the node's cordon: its drain and its uncordon are
// that owner's, and a takeover would let one lift the cordon while the
// other still needs it.
var ErrCordonedByOther = errors.New("cordoned by another owner")

// Cordon marks node unschedulable and records owner as the one who did. It
// is idempotent: a node owner cordoned already is left alone. A node that
// was unschedulable already stays so after Uncordon. A node another owner
// cordoned is refused (ErrCordonedByOther). extra annotations, if any, are
// written in the same request (saving the caller a write).
func Cordon(ctx context.Context, c *kube.Clientset, node, owner string, extra ...map[string]string) error {
	_, err := CordonSeen(ctx, c, node, nil, owner, extra...)
	return err
}

// CordonSeen is Cordon deciding from seen, the caller's copy of the Node
// (an informer's), instead of a GET: the write carries seen's resource
// version, so a copy that is not the latest fails it with a conflict and
// the retry reads the Node. A copy by which nothing is to be written is
// checked with a GET (a stale one must not skip the cordon). It returns
// the Node as written, nil when nothing was written. seen nil: Cordon.
func CordonSeen(ctx context.Context, c *kube.Clientset, node string, seen *corev1.Node, owner string, extra ...map[string]string) (written *corev1.Node, err error) {
	err = conflict.Retry(func() error {
		n := seen
		seen = nil // a retry reads the Node
		if n != nil && (cordonPatch(n, owner, extra) == nil || otherOwner(n, owner) != "") {
			n = nil // nothing to write, or a refusal: decided from a fresh read, not a copy
		}
		if n == nil {
			if n, err = c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
				return fmt.Errorf("cordon %s: read the node: %w", node, err)
			}
		}
		if by := otherOwner(n, owner); by != "" {
			return fmt.Errorf("cordon %s: %w, %q: its update holds the node; wait for it to end, or uncordon the node if it was left behind", node, ErrCordonedByOther, by)
		}
		patch := cordonPatch(n, owner, extra)
		if patch == nil {
			written = nil
			return nil
		}
		if written, err = mergePatch(ctx, c, node, patch); err != nil {
			return fmt.Errorf("cordon %s: %w", node, err)
		}
		return nil
	})
	return written, err
}

// otherOwner is the owner of n's cordon record when it is not owner, else "".
func otherOwner(n *corev1.Node, owner string) string {
	if by := n.Annotations[AnnotationCordonedBy]; by != owner {
		return by
	}
	return ""
}

// cordonPatch is the merge patch that cordons n for owner with extra
// annotations, conditional on n's resource version; nil when n is so already.
func cordonPatch(n *corev1.Node, owner string, extra []map[string]string) map[string]any {
	annotations := map[string]string{}
	for _, e := range extra {
		for k, v := range e {
			if n.Annotations[k] != v {
				annotations[k] = v
			}
		}
	}
	if n.Annotations[AnnotationCordonedBy] == owner && n.Spec.Unschedulable && len(annotations) == 0 {
		return nil
	}
	before := "true"
	if n.Spec.Unschedulable && n.Annotations[AnnotationCordonedBy] == "" {
		before = "false"
	}
	if n.Annotations[AnnotationCordonedBy] == owner {
		before = n.Annotations[AnnotationSchedulableBefore]
	}
	annotations[AnnotationCordonedBy], annotations[AnnotationSchedulableBefore] = owner, before
	return map[string]any{
		"metadata": map[string]any{
			"resourceVersion": n.ResourceVersion, // fail on a concurrent change rather than lose it
			"annotations":     annotations,
		},
		"spec": map[string]any{"unschedulable": true},
	}
}

// Meta is node metadata a caller writes in the same request as an
// Uncordon, saving itself a write (nil values remove keys).
type Meta struct {
	Labels, Annotations map[string]any
}

// Uncordon undoes Cordon: when owner cordoned node it removes the record
// and, if the node was schedulable before, makes it schedulable, writing
// also in the same request. It reports whether it changed the node; calling
// it again changes nothing (and writes nothing, also included).
func Uncordon(ctx context.Context, c *kube.Clientset, node, owner string, also ...Meta) (changed bool, err error) {
	written, err := UncordonSeen(ctx, c, node, nil, owner, also...)
	return written != nil, err
}

// UncordonSeen is Uncordon deciding from seen, the caller's copy of the
// Node, instead of a GET, as CordonSeen does (a conflict, or a copy by
// which there is nothing to lift, reads the Node). It returns the Node as
// written, nil when nothing was written. seen nil: Uncordon.
func UncordonSeen(ctx context.Context, c *kube.Clientset, node string, seen *corev1.Node, owner string, also ...Meta) (written *corev1.Node, err error) {
	err = conflict.Retry(func() error {
		n := seen
		seen = nil // a retry reads the Node
		if n != nil && n.Annotations[AnnotationCordonedBy] != owner {
			n = nil
		}
		if n == nil {
			if n, err = c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
				return fmt.Errorf("uncordon %s: read the node: %w", node, err)
			}
		}
		if n.Annotations[AnnotationCordonedBy] != owner {
			written = nil
			return nil
		}
		if written, err = mergePatch(ctx, c, node, uncordonPatch(n, also)); err != nil {
			return fmt.Errorf("uncordon %s: %w", node, err)
		}
		return nil
	})
	return written, err
}

// uncordonPatch lifts owner's cordon of n and writes also, conditional on
// n's resource version.
func uncordonPatch(n *corev1.Node, also []Meta) map[string]any {
	spec := map[string]any{}
	if n.Annotations[AnnotationSchedulableBefore] != "false" {
		spec["unschedulable"] = nil
	}
	labels, annotations := map[string]any{}, map[string]any{}
	for _, m := range also {
		maps.Copy(labels, m.Labels)
		maps.Copy(annotations, m.Annotations)
	}
	annotations[AnnotationCordonedBy], annotations[AnnotationSchedulableBefore] = nil, nil
	metadata := map[string]any{"resourceVersion": n.ResourceVersion, "annotations": annotations}
	if len(labels) > 0 {
		metadata["labels"] = labels
	}
	return map[string]any{"metadata": metadata, "spec": spec}
}

// CordonedBy returns who cordoned the node according to its annotation ("" = not slipway).
func CordonedBy(annotations map[string]string) string { return annotations[AnnotationCordonedBy] }

func mergePatch(ctx context.Context, c *kube.Clientset, node string, patch map[string]any) (*corev1.Node, error) {
	data, err := json.Marshal(patch)
	if err != nil {
		return nil, err
	}
	return c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, data, metav1.PatchOptions{})
}
