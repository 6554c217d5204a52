package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	swarmlisters "slipway.dev/slipway/ops/generated/swarm/listers/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/swarm/member"
)

type listWatcher[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// newInformer is a shared informer of objects like example, listed and
// watched through api, indexed by namespace.
func newInformer[L runtime.Object](api listWatcher[L], example runtime.Object, resync time.Duration) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return api.List(ctx, o) },
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return api.Watch(ctx, o)
		},
	}
	return cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, api), example, resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

// startInformers watches the namespace's Swarms, pods, ConfigMaps,
// StatefulSets, Deployments and ReplicaSets (whose controller tells a
// Deployment's pods); a Swarm's change enqueues it, any other
// change enqueues every Swarm (a namespace holds few), whose sync finds out
// whether it matters.
func (c *Controller) startInformers(ctx context.Context) error {
	ns := c.opts.Namespace
	swarmInf := newInformer(c.swarm.Swarms(ns), &swarmv1.Swarm{}, c.opts.Resync)
	podInf := newInformer(c.kube.CoreV1().Pods(ns), &corev1.Pod{}, 0)
	cmInf := newInformer(c.kube.CoreV1().ConfigMaps(ns), &corev1.ConfigMap{}, 0)
	stsInf := newInformer(c.kube.AppsV1().StatefulSets(ns), &appsv1.StatefulSet{}, 0)
	depInf := newInformer(c.kube.AppsV1().Deployments(ns), &appsv1.Deployment{}, 0)
	rsInf := newInformer(c.kube.AppsV1().ReplicaSets(ns), &appsv1.ReplicaSet{}, 0)
	c.replicaSets = rsInf.GetIndexer()
	leaseInf := newInformer(c.kube.CoordinationV1().Leases(ns), &coordinationv1.Lease{}, 0)
	c.leases = leaseInf.GetIndexer()
	c.swarms = swarmlisters.NewSwarmLister(swarmInf.GetIndexer())
	c.pods, c.configMaps = podInf.GetIndexer(), cmInf.GetIndexer()
	c.statefulSets, c.deployments = stsInf.GetIndexer(), depInf.GetIndexer()
	one := func(o any) {
		if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o); err == nil {
			c.queue.Add(k)
		}
	}
	all := func(any) { c.enqueueAll() }
	member := func(o any) { c.observeLease(o) }
	handlers := []struct {
		inf cache.SharedIndexInformer
		fn  func(any)
	}{{swarmInf, one}, {podInf, all}, {cmInf, all}, {stsInf, all}, {depInf, all}, {rsInf, all}, {leaseInf, member}}
	for _, h := range handlers {
		fn := h.fn
		if _, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: fn, UpdateFunc: func(_, o any) { fn(o) }, DeleteFunc: fn,
		}); err != nil {
			return fmt.Errorf("watch: %w", err)
		}
		go h.inf.Run(ctx.Done())
	}
	for _, h := range handlers {
		if !cache.WaitForCacheSync(ctx.Done(), h.inf.HasSynced) {
			return fmt.Errorf("the caches of namespace %s did not fill: %w", ns, ctx.Err())
		}
	}
	c.synced.Store(true)
	return nil
}

// observeLease notes when a worker's Lease was renewed, on this replica's
// clock; a Lease released or deleted (its worker stopped) queues every
// Swarm, whose jobs may now move.
func (c *Controller) observeLease(o any) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	l, ok := o.(*coordinationv1.Lease)
	if !ok || !strings.HasPrefix(l.Name, member.LeasePrefix) {
		return
	}
	if _, exists, _ := c.leases.Get(l); !exists {
		c.members.Forget(l.Name)
		c.enqueueAll()
		return
	}
	c.members.Observe(l, time.Now())
	// trust: swarm.lease.holder
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		c.enqueueAll()
	}
}

// enqueueAll queues every Swarm of the namespace.
func (c *Controller) enqueueAll() {
	if c.swarms == nil {
		return
	}
	list, err := c.swarms.Swarms(c.opts.Namespace).List(everything())
	if err != nil {
		return
	}
	for _, s := range list {
		c.queue.Add(s.Namespace + "/" + s.Name)
	}
}
