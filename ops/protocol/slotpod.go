package protocol

import (
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A slot's work (its upgrade, its activation, a rollback slot's rollback)
// and a staging run ahead of the slot run in a Pod that the node's agent
// creates bound to its own node, not in a Job: kube-controller-manager's
// Job controller writes seven times for each Job through a client limited
// to 20 requests a second, and that pace was a whole rollout's; staging
// Jobs met the same queue beside the first wave's activations
// (docs/design/2026-11-30-slot-pod-not-job.md). The pruning and rollback
// Jobs stay Jobs: they are rare. Whoever decides from a slot's Job decides
// the same from its Pod: JobOfSlotPod is the Job a slot Pod stands for,
// its name, labels, annotations, pod spec and deadline, and its outcome
// (and completion time) as the Job controller would write it.

// SlotPodOfNode reports whether pod p is a slot Pod of node's: bound to
// node (spec.nodeName, which the kubelet runs), with node's annotation
// and the upgrade label, and no owner. The Pod policy admits an agent's
// Pod only bound to the agent's own node, with no owner, under that
// node's name prefix: a Pod like this was created by node's agent (or an
// administrator). A Job's pod has the Job for its owner and is not one.
func SlotPodOfNode(p *corev1.Pod, node string) bool {
	// trust: ops.slot-pod.node-pin
	return p != nil && node != "" && p.Spec.NodeName == node && p.Annotations[AnnotationJobNode] == node &&
		p.Labels[LabelAppName] == LabelAppNameUpgrade && len(p.OwnerReferences) == 0
}

// JobOfSlotPod is the Job that slot Pod p stands for: p's name, UID,
// labels and annotations, its spec as the pod template, its deadline, and
// a Complete or Failed condition once the pod succeeded or failed. It
// shares p's maps and slices: a reader must not change it.
func JobOfSlotPod(p *corev1.Pod) *batchv1.Job {
	meta := metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
		CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp, Labels: p.Labels, Annotations: p.Annotations}
	j := &batchv1.Job{ObjectMeta: meta, Spec: batchv1.JobSpec{
		ActiveDeadlineSeconds: p.Spec.ActiveDeadlineSeconds,
		Template:              corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: p.Labels, Annotations: p.Annotations}, Spec: p.Spec},
	}}
	// trust: ops.slot-pod.phase
	if c, ok := slotPodCondition(p); ok {
		j.Status.Conditions = []batchv1.JobCondition{c}
		if c.Type == batchv1.JobComplete { // as the Job controller writes it with Complete
			done := c.LastTransitionTime
			j.Status.CompletionTime = &done
		}
	}
	return j
}

// slotPodCondition is the Job condition of pod p's outcome: Complete when
// it succeeded, Failed (with why) when it failed; none while it runs.
func slotPodCondition(p *corev1.Pod) (batchv1.JobCondition, bool) {
	var c batchv1.JobCondition
	switch p.Status.Phase {
	case corev1.PodSucceeded:
		c = batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}
	case corev1.PodFailed:
		c = batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: p.Status.Reason, Message: p.Status.Message}
		if t := terminated(p); t != nil && c.Reason == "" {
			c.Reason, c.Message = "PodFailed", t.Reason+", exit code "+strconv.Itoa(int(t.ExitCode))
		}
		if c.Reason == "" {
			c.Reason, c.Message = "PodFailed", "the pod failed"
		}
	default:
		return c, false
	}
	c.LastTransitionTime = p.CreationTimestamp
	if t := terminated(p); t != nil && !t.FinishedAt.IsZero() {
		c.LastTransitionTime = t.FinishedAt
	}
	return c, true
}

// terminated is the terminated state of pod p's first container, if any.
func terminated(p *corev1.Pod) *corev1.ContainerStateTerminated {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Terminated != nil {
			return cs.State.Terminated
		}
	}
	return nil
}
