// Package executor stands in for the kubelet of fake nodes for the pods that
// slipway runs on a node: it watches pods labelled
// app.kubernetes.io/name=slipway-upgrade that are bound to a fake node, runs
// their container's command as a local process with the pod's hostPath
// volumes mapped into that node's own directory, and writes the pod status
// (Running, then the container's exit code and phase Succeeded or Failed) back,
// so the real Job controller decides success, failure, retries and deadlines.
package executor

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// The label of the pods the executor runs, and the annotation of the nodes it
// serves (the ones kwok manages).
const (
	LabelKey       = "app.kubernetes.io/name"
	LabelValue     = "slipway-upgrade"
	NodeAnnotation = "kwok.x-k8s.io/node"
)

// Defaults of Options.
const (
	DefaultSelector       = LabelKey + "=" + LabelValue
	DefaultNodeAnnotation = NodeAnnotation
)

// Options configures the executor.
type Options struct {
	Client kubernetes.Interface
	// NodesRoot holds one directory per node: hostPath /x of a pod on node n is <NodesRoot>/<n>/x.
	NodesRoot string
	// Path is a PATH-style list where a container's argv[0] is looked up by base
	// name (so `slipway` runs this machine's build); it is also the process's PATH.
	Path string
	// Env is added to every process's environment (e.g. KUBECONFIG).
	Env []string
	// Selector picks the pods to run (default DefaultSelector).
	Selector string
	// NodeAnnotation must be present on a pod's node for the pod to be run
	// (default DefaultNodeAnnotation: kwok's fake nodes).
	NodeAnnotation string
	// Log receives what the executor does (default slog.Default()).
	Log *slog.Logger
}

// Executor runs the selected pods of fake nodes. Create it with New, start it with Run.
type Executor struct {
	opts  Options
	nodes cache.Indexer

	mu      sync.Mutex
	running map[types.UID]*podRun
	wg      sync.WaitGroup
}

// New checks opts and returns an Executor.
func New(opts Options) (*Executor, error) {
	if opts.Client == nil || opts.NodesRoot == "" {
		return nil, fmt.Errorf("executor: Client and NodesRoot are required")
	}
	if opts.Selector == "" {
		opts.Selector = DefaultSelector
	}
	if opts.NodeAnnotation == "" {
		opts.NodeAnnotation = DefaultNodeAnnotation
	}
	if opts.Path == "" {
		opts.Path = os.Getenv("PATH")
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	return &Executor{opts: opts, running: map[types.UID]*podRun{}}, nil
}

// Run watches pods until ctx ends, then kills the processes it started and waits for them.
func (x *Executor) Run(ctx context.Context) error {
	nodeInf := informers.NewSharedInformerFactory(x.opts.Client, 0)
	x.nodes = nodeInf.Core().V1().Nodes().Informer().GetIndexer()
	podInf := informers.NewSharedInformerFactoryWithOptions(x.opts.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = x.opts.Selector }))
	pods := podInf.Core().V1().Pods().Informer()
	_, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { x.observe(ctx, obj) },
		UpdateFunc: func(_, obj any) { x.observe(ctx, obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				x.forget(p.UID)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("executor: watch pods: %w", err)
	}
	// Nodes first: a pod is only run once its node is known.
	nodeInf.Start(ctx.Done())
	nodeInf.WaitForCacheSync(ctx.Done())
	podInf.Start(ctx.Done())
	podInf.WaitForCacheSync(ctx.Done())
	<-ctx.Done()
	x.mu.Lock()
	for _, r := range x.running {
		r.kill(2 * time.Second)
	}
	x.mu.Unlock()
	x.wg.Wait()
	nodeInf.Shutdown()
	podInf.Shutdown()
	return nil
}

// Running is the number of pod processes running now.
func (x *Executor) Running() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := 0
	for _, r := range x.running {
		if !r.ended() {
			n++
		}
	}
	return n
}

// observe starts a pod that is new to the executor, or kills one being deleted.
func (x *Executor) observe(ctx context.Context, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if pod.DeletionTimestamp != nil {
		if _, ok := x.node(pod.Spec.NodeName); ok {
			x.finishDeletion(ctx, pod)
		}
		return
	}
	if pod.Spec.NodeName == "" || pod.Status.Phase != corev1.PodPending {
		return
	}
	node, ok := x.node(pod.Spec.NodeName)
	if !ok {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, seen := x.running[pod.UID]; seen || ctx.Err() != nil {
		return
	}
	r := newPodRun(x, pod.DeepCopy(), node)
	x.running[pod.UID] = r
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		r.run(ctx)
	}()
}

// node returns the pod's node when it is one the executor serves.
func (x *Executor) node(name string) (*corev1.Node, bool) {
	if x.nodes == nil {
		return nil, false
	}
	obj, ok, err := x.nodes.GetByKey(name)
	if err != nil || !ok {
		return nil, false
	}
	n := obj.(*corev1.Node)
	_, fake := n.Annotations[x.opts.NodeAnnotation]
	return n, fake
}

// finishDeletion does a kubelet's part of a pod's deletion, once per pod: it
// stops the pod's process within the grace period, then deletes the pod for good.
func (x *Executor) finishDeletion(ctx context.Context, pod *corev1.Pod) {
	x.mu.Lock()
	r, ok := x.running[pod.UID]
	if !ok {
		r = &podRun{x: x, pod: pod.DeepCopy()}
		x.running[pod.UID] = r
	}
	first := r.markDeleted()
	x.mu.Unlock()
	if !first {
		return
	}
	grace := time.Duration(0)
	if pod.DeletionGracePeriodSeconds != nil {
		grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	}
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		r.kill(grace)
		zero := int64(0)
		err := x.opts.Client.CoreV1().Pods(pod.Namespace).Delete(context.WithoutCancel(ctx), pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &pod.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			x.opts.Log.Warn("cannot finish the pod's deletion", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		}
	}()
}

// forget drops a deleted pod, killing its process if it still runs.
func (x *Executor) forget(uid types.UID) {
	x.mu.Lock()
	r, ok := x.running[uid]
	delete(x.running, uid)
	x.mu.Unlock()
	if ok {
		r.markDeleted()
		go r.kill(0)
	}
}
