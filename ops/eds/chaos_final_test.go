package eds

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
)

// rolledOutExactly: each of nodes runs exactly one pod of EDS name, of
// image, Running and Ready, and no pod of it is anywhere else; the status
// says Running with every count at len(nodes); the only ERS left is the
// active one, of image, marked active and with no canary condition true.
func (h *harness) rolledOutExactly(name, image string, nodes []string) (bool, string) {
	ctx := context.Background()
	pods, err := h.kube.CoreV1().Pods(h.ns).List(ctx, metav1.ListOptions{LabelSelector: v1.LabelName + "=" + name})
	if err != nil {
		return false, err.Error()
	}
	on := map[string][]string{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || p.Spec.Containers[0].Image != image || p.Status.Phase != corev1.PodRunning || !podReady(p) {
			return false, fmt.Sprintf("pod %s on %s: %s, %s, ready %v, deleting %v", p.Name, nodeOf(p), p.Spec.Containers[0].Image, p.Status.Phase, podReady(p), p.DeletionTimestamp != nil)
		}
		on[nodeOf(p)] = append(on[nodeOf(p)], p.Name)
	}
	for _, n := range nodes {
		if len(on[n]) != 1 {
			return false, fmt.Sprintf("node %s runs %v", n, on[n])
		}
		delete(on, n)
	}
	if len(on) > 0 {
		return false, fmt.Sprintf("pods on nodes not selected: %v", on)
	}
	e, err := h.eds.EdsV1alpha1().ExtendedDaemonSets(h.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	n, st := int32(len(nodes)), e.Status
	if st.State != v1.StateRunning || st.Canary != nil || st.Desired != n || st.Current != n || st.Ready != n || st.Available != n || st.UpToDate != n || st.ObservedGeneration != e.Generation {
		return false, fmt.Sprintf("status %+v", st)
	}
	return h.onlyActiveERS(name, image, st.ActiveReplicaSet, n)
}

func (h *harness) onlyActiveERS(name, image, active string, n int32) (bool, string) {
	list, err := h.eds.EdsV1alpha1().ExtendedDaemonSetReplicaSets(h.ns).List(context.Background(), metav1.ListOptions{LabelSelector: v1.LabelEDSOwner + "=" + name})
	if err != nil {
		return false, err.Error()
	}
	if len(list.Items) != 1 {
		var names []string
		for _, s := range list.Items {
			names = append(names, s.Name+"/"+string(s.Status.Status))
		}
		return false, fmt.Sprintf("ERSs %v, want only the active %s", names, active)
	}
	s := list.Items[0]
	if s.Name != active || s.Spec.Template.Spec.Containers[0].Image != image || s.Status.Status != v1.ReplicaSetStatusActive || s.Status.Available != n {
		return false, fmt.Sprintf("ERS %s (%s): status %+v; want the active one, %s", s.Name, s.Spec.Template.Spec.Containers[0].Image, s.Status, active)
	}
	for _, c := range s.Status.Conditions {
		if c.Status == metav1.ConditionTrue && (c.Type == v1.ConditionCanaryPaused || c.Type == v1.ConditionCanaryFailed) {
			return false, fmt.Sprintf("ERS %s: condition %s true: %s", s.Name, c.Type, c.Message)
		}
	}
	return true, ""
}
