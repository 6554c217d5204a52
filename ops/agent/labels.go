package agent

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/upgrade/layout"
)

// Versions are the versions of a node's components: what a system
// directory's `current` links name, or what a boot runs.
type Versions = plan.Versions

// ReadVersions reads the current versions of the system directory root.
func ReadVersions(root string) (Versions, error) {
	l := layout.New(root)
	var v Versions
	for _, c := range []struct {
		comp layout.Component
		out  *string
	}{{layout.Rootfs, &v.Rootfs}, {layout.Kernel, &v.Kernel}, {layout.K3s, &v.K3s}} {
		cur, err := l.Current(c.comp)
		if err != nil {
			return v, fmt.Errorf("read the %s version of system directory %s: %w", c.comp, root, err)
		}
		*c.out = cur
	}
	return v, nil
}

// nodeMeta is the labels and annotations that publish v on a Node; empty
// versions remove their keys (nil values in a merge patch).
func nodeMeta(v Versions) (labels, annotations map[string]any) {
	labels, annotations = map[string]any{}, map[string]any{}
	for _, kv := range []struct{ label, annotation, value string }{
		{protocol.LabelRootfsVersion, protocol.AnnotationRootfsVersion, v.Rootfs},
		{protocol.LabelKernelVersion, protocol.AnnotationKernelVersion, v.Kernel},
		{protocol.LabelK3sVersion, protocol.AnnotationK3sVersion, v.K3s},
	} {
		if kv.value == "" {
			labels[kv.label], annotations[kv.annotation] = nil, nil
			continue
		}
		labels[kv.label], annotations[kv.annotation] = protocol.LabelValue(kv.value), kv.value
	}
	return labels, annotations
}

// channelOf names the channel of an upgrade Job or its pod: the exact name
// from its annotation, else (a Job of an older agent) its label, which is
// the name itself when it is short enough to be a label value.
func channelOf(m metav1.ObjectMeta) string {
	if c, ok := m.Annotations[protocol.AnnotationJobChannel]; ok {
		return c
	}
	return m.Labels[protocol.LabelJobChannel]
}
