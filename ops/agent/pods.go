package agent

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// newPodInformer watches the pods of this node's upgrade Jobs. The agent
// moves on when the pod has succeeded rather than when the Job controller
// marks the Job Complete: that controller batches pod updates and writes
// the Job's status about a second later, a second every node would wait.
func (a *Agent) newPodInformer() cache.SharedIndexInformer {
	selector := labels.SelectorFromSet(labels.Set{LabelJobNode: LabelValue(a.opts.NodeName)}).String()
	pods := a.kube.CoreV1().Pods(a.opts.Namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return pods.Watch(ctx, o)
		},
	}
	return cache.NewSharedIndexInformer(lw, &corev1.Pod{}, a.opts.Resync, cache.Indexers{})
}

// podSucceeded reports whether a pod of Job job has succeeded. With
// completions 1 and no retries inside the Job, that pod's success is the Job's.
func (a *Agent) podSucceeded(job string) bool {
	for _, o := range a.pods.List() {
		if p, ok := o.(*corev1.Pod); ok && p.Labels[batchJobNameLabel] == job && p.Status.Phase == corev1.PodSucceeded {
			return true
		}
	}
	return false
}

// batchJobNameLabel is the label the Job controller puts on a Job's pods.
const batchJobNameLabel = "batch.kubernetes.io/job-name"
