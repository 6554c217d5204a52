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
	"fmt"
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

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

// Cordon marks node unschedulable and records owner as the one who did. It
// is idempotent: a node owner cordoned already is left alone. A node that
// was unschedulable already stays so after Uncordon. extra annotations, if
// any, are written in the same request (saving the caller a write).
func Cordon(ctx context.Context, c *kube.Clientset, node, owner string, extra ...map[string]string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error { return cordonOnce(ctx, c, node, owner, extra) })
}

func cordonOnce(ctx context.Context, c *kube.Clientset, node, owner string, extra []map[string]string) error {
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("cordon %s: read the node: %w", node, err)
	}
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
	patch := map[string]any{
		"metadata": map[string]any{
			"resourceVersion": n.ResourceVersion, // fail on a concurrent change rather than lose it
			"annotations":     annotations,
		},
		"spec": map[string]any{"unschedulable": true},
	}
	if err := mergePatch(ctx, c, node, patch); err != nil {
		return fmt.Errorf("cordon %s: %w", node, err)
	}
	return nil
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
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		changed, err = uncordonOnce(ctx, c, node, owner, also)
		return err
	})
	return changed, err
}

func uncordonOnce(ctx context.Context, c *kube.Clientset, node, owner string, also []Meta) (bool, error) {
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("uncordon %s: read the node: %w", node, err)
	}
	if n.Annotations[AnnotationCordonedBy] != owner {
		return false, nil
	}
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
	patch := map[string]any{"metadata": metadata, "spec": spec}
	if err := mergePatch(ctx, c, node, patch); err != nil {
		return false, fmt.Errorf("uncordon %s: %w", node, err)
	}
	return true, nil
}

// CordonedBy returns who cordoned the node according to its annotation ("" = not slipway).
func CordonedBy(annotations map[string]string) string { return annotations[AnnotationCordonedBy] }

func mergePatch(ctx context.Context, c *kube.Clientset, node string, patch map[string]any) error {
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, data, metav1.PatchOptions{})
	return err
}
