// Package controller is `slipway swarm controller`: it watches the Swarms of
// a namespace, their worker pods and ConfigMaps, assigns every job to exactly
// one Ready worker (package plan, over package assign), writes the workers'
// ConfigMap and the Swarm's status only when the assignment changes, and
// refreshes only the workers whose share changed. One replica at a time acts,
// the holder of a Lease; every replica serves /assignments, /metrics and
// /healthz.
package controller

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	swarmclient "slipway.dev/slipway/ops/generated/swarm/clientset/versioned/typed/swarm.slipway.dev/v1alpha1"
	swarmlisters "slipway.dev/slipway/ops/generated/swarm/listers/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/health"
	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/lease"
	"slipway.dev/slipway/ops/swarm/member"
)

// Controller is one replica of the swarm controller.
type Controller struct {
	opts Options
	log  *slog.Logger
	// kube and swarm write only while this replica's Lease tenure lasts
	// (lease.Tenure.WrapTransport): a replica stalled past its renew
	// deadline cannot write a config or delete a pod after another took
	// over. elector, unfenced, renews the Lease itself.
	kube     *kube.Clientset
	elector  *kube.Clientset
	tenure   lease.Tenure
	swarm    swarmclient.SwarmV1alpha1Interface
	swarms   swarmlisters.SwarmLister
	pods     cache.Indexer
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
	metrics  *metrics
	leading  atomic.Bool
	synced   atomic.Bool
	// probe serves /healthz (the work loop turns) and /readyz (caches
	// filled); beat marks a turn of the work loop.
	probe *health.Probe
	beat  func()
	addr  atomic.Value // the HTTP server's address, once listening

	configMaps, statefulSets, deployments, replicaSets, leases cache.Indexer
	// members judges the workers' Leases on this replica's clock.
	members *member.Observer

	mu        sync.Mutex
	unsettled map[string]time.Time // Swarm key: since when its workloads are not at their desired Ready pods
	forced    map[string]bool      // Swarm key: reassigning though unsettled, until the handover is done
	written   map[string]string    // Swarm key: resourceVersion of this replica's last status write the cache has not shown yet
	refused   map[string]*tooLarge // Swarm key: the config whose writes the API server refused as too large
}

// Run runs a controller until ctx ends.
func Run(ctx context.Context, opts Options) error {
	c, err := New(opts)
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// New builds a controller from opts.
func New(opts Options) (*Controller, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Controller{opts: opts, log: opts.Log.With("controller", "swarm", "namespace", opts.Namespace), probe: health.New(),
		metrics: newMetrics(), unsettled: map[string]time.Time{}, forced: map[string]bool{}, written: map[string]string{}, refused: map[string]*tooLarge{}, members: member.NewObserver()}
	c.beat = c.probe.Loop("work", opts.StallAfter)
	c.probe.ReadyWhen("caches", c.synced.Load)
	if c.elector, err = kube.NewForConfig(rest.CopyConfig(opts.Config)); err != nil {
		return nil, fmt.Errorf("build the Lease client: %w", err)
	}
	fenced := rest.CopyConfig(opts.Config)
	fenced.Wrap(c.tenure.WrapTransport)
	if fenced.QPS == 0 && fenced.RateLimiter == nil {
		// A share per worker: a full reassignment of 1,000 workers is 1,000
		// pod patches, over 3 minutes at client-go's default 5/s.
		fenced.QPS, fenced.Burst = 50, 100
	}
	if c.kube, err = kube.NewForConfig(fenced); err != nil {
		return nil, fmt.Errorf("build the Kubernetes client: %w", err)
	}
	if c.swarm, err = swarmclient.NewForConfig(fenced); err != nil {
		return nil, fmt.Errorf("build the Swarm client: %w", err)
	}
	return c, nil
}

// Run starts the caches, the HTTP server and the candidacy for the Lease,
// and syncs Swarms while it holds the Lease, until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	recorder, stopEvents, err := kube.Recorder{Namespace: c.opts.Namespace, Component: "slipway-swarm", Host: c.opts.Identity,
		AddToScheme: []func(*runtime.Scheme) error{swarmv1.AddToScheme}}.Start(c.kube)
	if err != nil {
		return err
	}
	defer stopEvents()
	c.recorder = recorder
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "slipway-swarm"})
	defer c.queue.ShutDown()
	if c.opts.HTTPAddr != "" {
		if err := c.serveHTTP(ctx); err != nil {
			return err
		}
	}
	if err := c.startInformers(ctx); err != nil {
		return err
	}
	c.log.Info("swarm controller started", "identity", c.opts.Identity)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); c.elect(ctx) }()
	go func() { defer wg.Done(); c.work(ctx) }()
	go func() { defer wg.Done(); c.tick(ctx) }()
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

// elect competes for the Lease; taking it queues every Swarm.
func (c *Controller) elect(ctx context.Context) {
	d := c.opts.LeaseDuration
	err := lease.Run(ctx, lease.Config{
		Client: c.elector.CoordinationV1().Leases(c.opts.Namespace), Name: c.opts.LeaseName, Identity: c.opts.Identity,
		Duration: d, RenewDeadline: d * 2 / 3, RetryPeriod: d / 5, Log: c.log, Tenure: &c.tenure,
		OnStartedLeading: func() {
			c.leading.Store(true)
			c.metrics.leader.Set(1)
			c.log.Info("leading: this replica assigns the jobs")
			c.enqueueAll()
		},
		OnStoppedLeading: func() {
			c.leading.Store(false)
			c.metrics.leader.Set(0)
			c.log.Info("no longer leading")
		},
	})
	if err != nil {
		c.log.Error("cannot compete for the Lease", "lease", c.opts.LeaseName, "err", err)
	}
}

// tickKey is queued every few seconds so that the work loop turns, and
// beats, when it has nothing to do: a loop wedged in a sync misses it.
const tickKey = "\x00tick"

// tick queues tickKey until ctx ends.
func (c *Controller) tick(ctx context.Context) {
	every := max(c.opts.StallAfter/6, 100*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.queue.Add(tickKey)
		}
	}
}

// work syncs queued Swarms while leading; keys queued meanwhile are
// dropped (taking the Lease queues them all again). Each turn beats.
func (c *Controller) work(ctx context.Context) {
	for {
		key, shutdown := c.queue.Get()
		if shutdown {
			return
		}
		c.beat()
		if key == tickKey {
			c.queue.Done(key)
			continue
		}
		if !c.leading.Load() {
			c.queue.Forget(key)
			c.queue.Done(key)
			continue
		}
		after, err := c.sync(ctx, key)
		switch {
		case apierrors.IsConflict(err):
			c.log.Debug("stale cache; retrying", "swarm", key, "err", err)
			c.queue.AddRateLimited(key)
		case err != nil:
			c.log.Warn("sync failed; retrying", "swarm", key, "err", err)
			c.queue.AddRateLimited(key)
		case after > 0:
			c.queue.Forget(key)
			c.queue.AddAfter(key, after)
		default:
			c.queue.Forget(key)
		}
		c.queue.Done(key)
	}
}

// Addr is the address the HTTP server listens on ("" before it does, or
// without one).
func (c *Controller) Addr() string {
	a, _ := c.addr.Load().(string)
	return a
}

// Leading reports whether this replica holds the Lease.
func (c *Controller) Leading() bool { return c.leading.Load() }

func everything() labels.Selector { return labels.Everything() }
