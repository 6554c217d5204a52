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

// The caches of this node's Jobs and their pods. The informers select by
// the node label (a filter on the server, to keep the caches small), but a
// label is no identity: any agent may put any node's label on the Jobs it
// creates. What binds a Job to this node is its pod template pinned to
// this node (the admission policy admits an agent's Job only pinned to
// the agent's own node), and a pod to its Job its controller reference.
// A slot's work runs in a Pod of its own (slotpod.go), bound to this node
// by the same kind of policy; the Job store shows it as the Job it stands
// for (protocol.JobOfSlotPod). The stores below show every reader of the
// agent (the slot's Job state, staging, rollbacks) only those: the one
// place the filter is made.

// ownJobs is the Job informer's store showing only this node's own Jobs
// (protocol.JobOfNode), and this node's slot Pods as Jobs
// (protocol.SlotPodOfNode) from the pod informer's store.
type ownJobs struct {
	cache.Indexer
	pods cache.Store
	node string
}

func (s ownJobs) List() []any {
	var out []any
	for _, o := range s.Indexer.List() {
		if j, ok := o.(*batchv1.Job); ok && protocol.JobOfNode(j, s.node) {
			out = append(out, o)
		}
	}
	for _, o := range s.pods.List() {
		if p, ok := o.(*corev1.Pod); ok && protocol.SlotPodOfNode(p, s.node) {
			out = append(out, protocol.JobOfSlotPod(p))
		}
	}
	return out
}

// GetByKey is this node's Job of key, else the Job its slot Pod of key
// stands for.
func (s ownJobs) GetByKey(key string) (any, bool, error) {
	o, ok, err := s.Indexer.GetByKey(key)
	if j, isJob := o.(*batchv1.Job); ok && err == nil && isJob && protocol.JobOfNode(j, s.node) {
		return o, true, nil
	}
	o, ok, err = s.pods.GetByKey(key)
	if p, isPod := o.(*corev1.Pod); ok && err == nil && isPod && protocol.SlotPodOfNode(p, s.node) {
		return protocol.JobOfSlotPod(p), true, nil
	}
	return nil, false, err
}

func (s ownJobs) Get(obj any) (any, bool, error) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return nil, false, err
	}
	return s.GetByKey(key)
}

// anyJob is the Job of that key in the cache whoever it belongs to: only
// to tell why a name this node needs is taken.
func (s ownJobs) anyJob(key string) *batchv1.Job {
	o, ok, _ := s.Indexer.GetByKey(key)
	if !ok {
		return nil
	}
	j, _ := o.(*batchv1.Job)
	return j
}

// anyPod is the pod of that key in the cache whoever it belongs to: only
// to tell why a name this node needs for a slot Pod is taken.
func (s ownJobs) anyPod(key string) *corev1.Pod {
	o, ok, _ := s.pods.GetByKey(key)
	if !ok {
		return nil
	}
	p, _ := o.(*corev1.Pod)
	return p
}

// ownPods is the pod informer's store showing only pods on this node.
type ownPods struct {
	cache.Store
	node string
}

func (s ownPods) List() []any {
	var out []any
	for _, o := range s.Store.List() {
		if p, ok := o.(*corev1.Pod); ok && p.Spec.NodeName == s.node {
			out = append(out, o)
		}
	}
	return out
}

// podInformer watches the pods of this node's upgrade Jobs. The agent moves
// on when the pod has succeeded rather than when the Job controller marks
// the Job Complete: that controller batches pod updates and writes the
// Job's status about a second later, a second every node would wait.
func (a *Agent) podInformer() cache.SharedIndexInformer {
	return process.NewInformerWatching(a.kube.CoreV1().Pods(a.opts.Namespace), &corev1.Pod{}, a.opts.Resync, process.AgentWatch, func(o *metav1.ListOptions) {
		o.LabelSelector = labels.SelectorFromSet(labels.Set{protocol.LabelJobNode: protocol.LabelValue(a.opts.NodeName)}).String()
	})
}

// podSucceeded reports whether a pod of Job j (this very Job: its
// controller reference names its UID, and it runs on this node) has
// succeeded. With completions 1 and no retries inside the Job, that pod's
// success is the Job's.
func (a *Agent) podSucceeded(j *batchv1.Job) bool {
	for _, o := range a.podCache().List() {
		p, ok := o.(*corev1.Pod)
		// trust: ops.pod.phase
		if ok && protocol.PodOfJob(p, j, a.opts.NodeName) && p.Status.Phase == corev1.PodSucceeded {
			return true
		}
	}
	return false
}
