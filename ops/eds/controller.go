package eds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/crds"
	edsclient "slipway.dev/slipway/ops/generated/eds/clientset/versioned/typed/eds.slipway.dev/v1alpha1"
	edslisters "slipway.dev/slipway/ops/generated/eds/listers/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/health"
	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/lease"
	"slipway.dev/slipway/version"
)

// Controller reconciles ExtendedDaemonSets. Handlers only enqueue the
// ExtendedDaemonSet concerned; sync is idempotent and keyed by namespace/name.
type Controller struct {
	opts     Options
	log      *slog.Logger
	kube     *kube.Clientset
	eds      edsclient.EdsV1alpha1Interface
	sets     edslisters.ExtendedDaemonSetLister
	ers      edslisters.ExtendedDaemonSetReplicaSetLister
	settings edslisters.ExtendedDaemonsetSettingLister
	nodes    cache.Indexer
	pods     cache.Indexer // the controller's pods, indexed by ExtendedDaemonSet
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
	metrics  *metrics

	mu         sync.Mutex
	written    map[string]any                  // "eds/<uid>" or "ers/<uid>" -> the status last written
	writtenAt  map[string]time.Time            // and when
	pending    map[string]map[string]time.Time // per EDS: "create/<node>" and "delete/<pod>" not yet seen in the cache
	failed     map[string]*failures            // "<ns>/<eds>/<node>" -> pods failed there in a row
	oldGone    map[string]time.Time            // "<eds uid>/<daemonset>" -> when the old DaemonSet was found gone
	oldDrained map[string]time.Time            // "<eds uid>/<daemonset>" -> when the old DaemonSet was found drained
	analyses   map[types.UID]analysisMemo      // canary ERS -> its analysis's latest evaluation

	undecodable decodeErrors // the group's cached objects that did not decode whole

	// With election, every write of kube and eds is fenced by the Lease's
	// tenure: a leader that stalled past its renew deadline must not delete
	// pods beside a new leader's deletions (together past maxUnavailable).
	// The elector writes the Lease through leases, not fenced. Both nil
	// without election.
	tenure *lease.Tenure
	leases *kube.Clientset

	// probe serves /healthz (each worker beats: idle, or within
	// loopAllowance of its sync's start) and /readyz (informers synced),
	// leader or not.
	probe         *health.Probe
	loopAllowance time.Duration
	beforeSync    func(key string) // tests wedge a sync here
}

// defaultLoopAllowance is how long one sync may run before /healthz says
// its worker is wedged and the kubelet restarts the container.
const defaultLoopAllowance = 2 * time.Minute

// maxRetryDelay is the longest wait before a failed sync is retried.
const maxRetryDelay = 30 * time.Second

// indexByEDS indexes pods by "<namespace>/<ExtendedDaemonSet>", indexByNode by their node.
const (
	indexByEDS  = "eds"
	indexByNode = "node"
)

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
	cfg := *opts.Config
	if cfg.QPS == 0 { // client-go's default (5 QPS) would pace a 100-node rollout at 2 nodes/s
		cfg.QPS, cfg.Burst = opts.QPS, opts.Burst
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "slipway-eds-controller/" + version.Version
	}
	opts.Config = &cfg
	c := &Controller{opts: opts, log: opts.Log, metrics: newMetrics(), pending: map[string]map[string]time.Time{}, written: map[string]any{}, writtenAt: map[string]time.Time{}, failed: map[string]*failures{}, oldGone: map[string]time.Time{}, oldDrained: map[string]time.Time{}, analyses: map[types.UID]analysisMemo{},
		probe: health.New(), loopAllowance: defaultLoopAllowance}
	clients := opts.Config // the CRDs' install (before leading) uses opts.Config as is
	if opts.LeaderElect {
		if c.leases, err = kube.NewForConfig(rest.CopyConfig(opts.Config)); err != nil {
			return nil, fmt.Errorf("build the Lease client: %w", err)
		}
		c.tenure = &lease.Tenure{}
		clients = rest.CopyConfig(opts.Config)
		clients.Wrap(c.tenure.WrapTransport)
	}
	if c.kube, err = kube.NewForConfig(clients); err != nil {
		return nil, fmt.Errorf("build the Kubernetes client: %w", err)
	}
	if c.eds, err = edsclient.NewForConfig(clients); err != nil {
		return nil, fmt.Errorf("build the ExtendedDaemonSet client: %w", err)
	}
	return c, nil
}

// Run installs the CRDs when asked, starts the informers and, while this
// process leads (always, without leader election), the workers.
func (c *Controller) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if c.opts.InstallCRDs {
		if err := crds.Apply(ctx, c.opts.Config, v1.SchemeGroupVersion.Group); err != nil {
			return fmt.Errorf("install the CRDs (--install-crds): %w", err)
		}
	}
	// Events go to the namespace of the object they are about.
	recorder, stopEvents, err := kube.Recorder{Component: "slipway-eds", QPS: 5,
		AddToScheme: []func(*runtime.Scheme) error{v1.AddToScheme}}.Start(c.kube)
	if err != nil {
		return err
	}
	defer stopEvents()
	c.recorder = recorder
	// Failed syncs back off from 5 ms to 30 s (client-go's default goes to
	// 1,000 s): a quota raised or a webhook fixed is seen within 30 s.
	limiter := workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, maxRetryDelay),
		&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(10), 100)})
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(limiter,
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "slipway-eds"})
	defer c.queue.ShutDown()
	if err := c.startInformers(ctx); err != nil {
		return err
	}
	if err := c.serveMetrics(ctx); err != nil {
		return err
	}
	if !c.opts.LeaderElect {
		c.runWorkers(ctx)
		return nil
	}
	return c.lead(ctx, cancel)
}

// lead runs the workers while this process holds the Lease; losing it ends Run
// with an error, so that the process restarts with fresh caches.
func (c *Controller) lead(ctx context.Context, cancel context.CancelFunc) error {
	var lost bool
	var wg sync.WaitGroup
	err := lease.Run(ctx, lease.Config{
		Tenure: c.tenure,
		Client: c.leases.CoordinationV1().Leases(c.opts.LeaseNamespace), Name: c.opts.LeaseName, Identity: c.opts.Identity,
		Duration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second, Log: c.log,
		OnStartedLeading: func() {
			c.log.Info("leading: reconciling ExtendedDaemonSets", "lease", c.opts.LeaseNamespace+"/"+c.opts.LeaseName)
			wg.Add(1)
			go func() { defer wg.Done(); c.runWorkers(ctx) }()
		},
		OnStoppedLeading: func() { lost = ctx.Err() == nil; cancel() },
	})
	wg.Wait()
	if lost {
		return errors.New("eds: lost the leader Lease; exiting so that a fresh process competes again")
	}
	return err
}

func (c *Controller) runWorkers(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range c.opts.Workers {
		beat := c.probe.Loop(fmt.Sprintf("worker-%d", i), c.loopAllowance)
		var busy atomic.Bool
		go func() { // an idle worker (blocked on the queue) is alive
			t := time.NewTicker(c.loopAllowance / 4)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					if !busy.Load() {
						beat()
					}
				}
			}
		}()
		wg.Add(1)
		go func() { defer wg.Done(); c.work(ctx, beat, &busy) }()
	}
	c.log.Info("eds controller started", "namespace", c.opts.Namespace, "workers", c.opts.Workers)
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
}

func (c *Controller) work(ctx context.Context, beat func(), busy *atomic.Bool) {
	for {
		key, quit := c.queue.Get()
		if quit {
			return
		}
		busy.Store(true)
		beat()
		if c.beforeSync != nil {
			c.beforeSync(key)
		}
		after, err := c.sync(ctx, key)
		busy.Store(false)
		beat()
		switch {
		case err != nil && ctx.Err() == nil:
			c.log.Warn("sync failed; retrying", "eds", key, "err", err)
			c.metrics.syncErrors.Inc()
			c.queue.AddRateLimited(key)
		default:
			c.queue.Forget(key)
			if after > 0 {
				c.queue.AddAfter(key, after)
			}
		}
		c.queue.Done(key)
	}
}

// startInformers starts the caches of ExtendedDaemonSets, their ERSs,
// settings and pods (in the watched namespace) and of Nodes, and waits
// until they are filled.
func (c *Controller) startInformers(ctx context.Context) error {
	ns := c.opts.Namespace
	// The group's own objects are decoded one by one (decode.go).
	rc := c.eds.RESTClient()
	edsInf := newTolerantInformer(c.undecodable.tolerantListWatch(rc, "extendeddaemonsets", ns, func() runtime.Object { return &v1.ExtendedDaemonSet{} }), &v1.ExtendedDaemonSet{})
	ersInf := newTolerantInformer(c.undecodable.tolerantListWatch(rc, "extendeddaemonsetreplicasets", ns, func() runtime.Object { return &v1.ExtendedDaemonSetReplicaSet{} }), &v1.ExtendedDaemonSetReplicaSet{})
	setInf := newTolerantInformer(c.undecodable.tolerantListWatch(rc, "extendeddaemonsetsettings", ns, func() runtime.Object { return &v1.ExtendedDaemonsetSetting{} }), &v1.ExtendedDaemonsetSetting{})
	podInf := newInformer(c.kube.CoreV1().Pods(ns), &corev1.Pod{}, func(o *metav1.ListOptions) { o.LabelSelector = v1.LabelName })
	nodeInf := newInformer(c.kube.CoreV1().Nodes(), &corev1.Node{}, nil)
	if err := podInf.AddIndexers(cache.Indexers{indexByEDS: func(o any) ([]string, error) {
		p := o.(*corev1.Pod)
		return []string{p.Namespace + "/" + p.Labels[v1.LabelName]}, nil
	}, indexByNode: func(o any) ([]string, error) {
		if n := nodeOf(o.(*corev1.Pod)); n != "" {
			return []string{n}, nil
		}
		return nil, nil
	}}); err != nil {
		return err
	}
	c.sets = edslisters.NewExtendedDaemonSetLister(edsInf.GetIndexer())
	c.ers = edslisters.NewExtendedDaemonSetReplicaSetLister(ersInf.GetIndexer())
	c.settings = edslisters.NewExtendedDaemonsetSettingLister(setInf.GetIndexer())
	c.pods, c.nodes = podInf.GetIndexer(), nodeInf.GetIndexer()
	handlers := []struct {
		inf cache.SharedIndexInformer
		fn  func(any)
	}{
		{edsInf, c.enqueueObject},
		{ersInf, c.enqueueOwner},
		{podInf, func(o any) { c.enqueueLabel(o, v1.LabelName) }},
		{setInf, c.enqueueSetting},
	}
	if _, err := nodeInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { c.onNode(nil, asNode(o)) },
		UpdateFunc: func(o, n any) { c.onNode(asNode(o), asNode(n)) },
		DeleteFunc: func(o any) { c.onNode(asNode(o), nil) },
	}); err != nil {
		return err
	}
	// What the controller remembers of an object (written, writtenAt) goes with it.
	for _, h := range []struct {
		inf      cache.SharedIndexInformer
		prefixes []string
	}{{edsInf, []string{"eds/", "podtemplate/"}}, {ersInf, []string{"ers/"}}} {
		prefixes := h.prefixes
		if _, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(o any) {
			if m, ok := metaOf(o); ok {
				c.forgetWritten(m.GetUID(), prefixes...)
			}
		}}); err != nil {
			return err
		}
	}
	for _, h := range handlers {
		fn := h.fn
		if _, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: fn,
			UpdateFunc: func(_, o any) { fn(o) }, DeleteFunc: fn}); err != nil {
			return err
		}
	}
	all := []cache.SharedIndexInformer{edsInf, ersInf, setInf, podInf, nodeInf}
	c.probe.ReadyWhen("informers synced", func() bool {
		for _, inf := range all {
			if !inf.HasSynced() {
				return false
			}
		}
		return true
	})
	for _, inf := range all {
		go inf.RunWithContext(ctx)
	}
	for _, inf := range all {
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			return errors.New("eds: the caches did not fill: is the API server reachable and are the eds.slipway.dev CRDs installed (--install-crds)?")
		}
	}
	return nil
}

// forgetWritten drops what was last written for the object of uid.
func (c *Controller) forgetWritten(uid types.UID, prefixes ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range prefixes {
		delete(c.written, p+string(uid))
		delete(c.writtenAt, p+string(uid))
	}
	for k := range c.oldGone {
		if strings.HasPrefix(k, string(uid)+"/") {
			delete(c.oldGone, k)
		}
	}
	for k := range c.oldDrained {
		if strings.HasPrefix(k, string(uid)+"/") {
			delete(c.oldDrained, k)
		}
	}
}

func metaOf(o any) (metav1.Object, bool) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	m, ok := o.(metav1.Object)
	return m, ok
}

func (c *Controller) enqueueObject(o any) {
	if m, ok := metaOf(o); ok {
		c.queue.Add(m.GetNamespace() + "/" + m.GetName())
	}
}

func (c *Controller) enqueueLabel(o any, label string) {
	if m, ok := metaOf(o); ok && m.GetLabels()[label] != "" {
		c.queue.Add(m.GetNamespace() + "/" + m.GetLabels()[label])
	}
}

// enqueueOwner enqueues the ExtendedDaemonSet that controls an ERS, or
// that its owner label names.
func (c *Controller) enqueueOwner(o any) {
	m, ok := metaOf(o)
	if !ok {
		return
	}
	if ref := metav1.GetControllerOfNoCopy(m); ref != nil && ref.Kind == "ExtendedDaemonSet" {
		c.queue.Add(m.GetNamespace() + "/" + ref.Name)
		return
	}
	c.enqueueLabel(o, v1.LabelEDSOwner)
}

func (c *Controller) enqueueSetting(o any) {
	if s, ok := o.(*v1.ExtendedDaemonsetSetting); ok && s.Spec.Reference != nil {
		c.queue.Add(s.Namespace + "/" + s.Spec.Reference.Name)
	}
}

// listWatcher is a typed client's List and Watch.
type listWatcher[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// newInformer is a shared informer of objects like example, listed and
// watched through api with the options tweak sets, indexed by namespace.
func newInformer[L runtime.Object](api listWatcher[L], example runtime.Object, tweak func(*metav1.ListOptions)) cache.SharedIndexInformer {
	if tweak == nil {
		tweak = func(*metav1.ListOptions) {}
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			tweak(&o)
			return api.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			tweak(&o)
			return api.Watch(ctx, o)
		},
	}
	return cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, api), example, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

// newTolerantInformer is a shared informer over lw, indexed by namespace.
func newTolerantInformer(lw cache.ListerWatcher, example runtime.Object) cache.SharedIndexInformer {
	return cache.NewSharedIndexInformer(lw, example, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

// serveMetrics serves /metrics, /healthz and /readyz on --metrics-addr
// until ctx ends ("" = off).
func (c *Controller) serveMetrics(ctx context.Context) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(c.metrics.registry, promhttp.HandlerOpts{}))
	c.probe.Install(mux) // /healthz and /readyz
	if err := health.ListenAndServe(ctx, c.opts.MetricsAddr, mux, c.log); err != nil {
		return fmt.Errorf("--metrics-addr: %w", err)
	}
	return nil
}
