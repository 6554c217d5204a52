package agent

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"slipway.dev/slipway/ops/process"
	"slipway.dev/slipway/ops/protocol"
)

// podInformer watches the pods of this node's upgrade Jobs. The agent moves
// on when the pod has succeeded rather than when the Job controller marks
// the Job Complete: that controller batches pod updates and writes the
// Job's status about a second later, a second every node would wait.
func (a *Agent) podInformer() cache.SharedIndexInformer {
	return process.NewInformer(a.kube.CoreV1().Pods(a.opts.Namespace), &corev1.Pod{}, a.opts.Resync, func(o *metav1.ListOptions) {
		o.LabelSelector = labels.SelectorFromSet(labels.Set{protocol.LabelJobNode: protocol.LabelValue(a.opts.NodeName)}).String()
	})
}

// podSucceeded reports whether a pod of Job j (this very Job: its UID) has
// succeeded. With completions 1 and no retries inside the Job, that pod's
// success is the Job's.
func (a *Agent) podSucceeded(j *batchv1.Job) bool {
	for _, o := range a.pods.List() {
		p, ok := o.(*corev1.Pod)
		if ok && p.Labels[batchControllerUIDLabel] == string(j.UID) && p.Status.Phase == corev1.PodSucceeded {
			return true
		}
	}
	return false
}

// batchControllerUIDLabel is the label the Job controller puts on a Job's
// pods: the UID of their Job.
const batchControllerUIDLabel = "batch.kubernetes.io/controller-uid"
