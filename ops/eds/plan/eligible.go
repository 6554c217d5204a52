package plan

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// DaemonTolerations are the tolerations every daemon pod gets, as the
// built-in DaemonSet controller adds them: it keeps running on a node that is
// not ready, unreachable, under pressure, unschedulable or without network.
func DaemonTolerations() []corev1.Toleration {
	exists := func(key string, effect corev1.TaintEffect) corev1.Toleration {
		return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: effect}
	}
	return []corev1.Toleration{
		exists(corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute),
		exists(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute),
		exists(corev1.TaintNodeDiskPressure, corev1.TaintEffectNoSchedule),
		exists(corev1.TaintNodeMemoryPressure, corev1.TaintEffectNoSchedule),
		exists(corev1.TaintNodePIDPressure, corev1.TaintEffectNoSchedule),
		exists(corev1.TaintNodeUnschedulable, corev1.TaintEffectNoSchedule),
		exists(corev1.TaintNodeNetworkUnavailable, corev1.TaintEffectNoSchedule),
	}
}

// Selector converts an ExtendedDaemonSet's node selector; nil selects everything.
func Selector(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return labels.Everything(), nil
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return nil, fmt.Errorf("invalid node selector: %w", err)
	}
	return sel, nil
}

// Eligible says whether node should run a pod of spec: the node matches
// selector, the pod's nodeSelector and required node affinity, and every
// NoSchedule or NoExecute taint of the node is tolerated by the pod's
// tolerations or the daemon ones. A node being deleted is not eligible.
func Eligible(node *corev1.Node, selector labels.Selector, spec *corev1.PodSpec) bool {
	return admits(node, selector, spec, true)
}

// MayStay says whether a pod of spec already on node may keep running
// there: as Eligible, but a NoSchedule taint (which keeps new pods away)
// does not remove a running one, as with the DaemonSet controller; only
// an untolerated NoExecute taint does.
func MayStay(node *corev1.Node, selector labels.Selector, spec *corev1.PodSpec) bool {
	return admits(node, selector, spec, false)
}

func admits(node *corev1.Node, selector labels.Selector, spec *corev1.PodSpec, noSchedule bool) bool {
	if node.DeletionTimestamp != nil || !selector.Matches(labels.Set(node.Labels)) {
		return false
	}
	pod := &corev1.Pod{Spec: *spec}
	if ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); err != nil || !ok {
		return false
	}
	tolerations := append(append([]corev1.Toleration{}, spec.Tolerations...), DaemonTolerations()...)
	_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, tolerations, func(t *corev1.Taint) bool {
		return (noSchedule && t.Effect == corev1.TaintEffectNoSchedule) || t.Effect == corev1.TaintEffectNoExecute
	}, false)
	return !untolerated
}
