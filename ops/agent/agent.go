package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/crds"
	"slipway.dev/slipway/ops/generated/clientset/versioned"
	opsinformers "slipway.dev/slipway/ops/generated/informers/externalversions"
	opslisters "slipway.dev/slipway/ops/generated/listers/ops.slipway.dev/v1"
)

// Agent is one running agent. Handlers only enqueue; the syncs are keyed by
// role and channel name and are idempotent.
type Agent struct {
	opts     Options
	log      *slog.Logger
	kube     kubernetes.Interface
	ops      versioned.Interface
	meta     metadata.Interface
	channels opslisters.UpdateChannelLister
	nodes    cache.Indexer // this agent's own Node only
	jobs     cache.Indexer // this agent's node's upgrade Jobs only
	pods     cache.Store   // their pods
	queue    workqueue.TypedRateLimitingInterface[key]
	recorder record.EventRecorder
	metrics  *metrics

	mu         sync.Mutex
	elections  map[string]*election
	fleet      map[string]*fleetCache
	rebooting  bool      // a reboot was requested by this process
	notReadyAt time.Time // when this process first saw its node not Ready after a reboot
	waitSince  map[string]time.Time
	wrote      map[string]v1.Slot // per channel: this node's slot as this agent last wrote it
}

// key is a unit of work: one role's sync of one channel.
type key struct {
	role    role
	channel string
}

type role int

const (
	roleNode  role = iota // drive this node's own slot
	roleFleet             // the fleet view, when this agent holds the channel's Lease
)

// Run runs an agent until ctx ends.
func Run(ctx context.Context, opts Options) error {
	a, err := New(opts)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// New builds an agent from opts.
func New(opts Options) (*Agent, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	a := &Agent{opts: opts, log: opts.Log.With("node", opts.NodeName), metrics: newMetrics(),
		elections: map[string]*election{}, fleet: map[string]*fleetCache{}, waitSince: map[string]time.Time{}, wrote: map[string]v1.Slot{}}
	if a.kube, err = kubernetes.NewForConfig(opts.Config); err != nil {
		return nil, fmt.Errorf("build the Kubernetes client: %w", err)
	}
	if a.ops, err = versioned.NewForConfig(opts.Config); err != nil {
		return nil, fmt.Errorf("build the UpdateChannel client: %w", err)
	}
	if a.meta, err = metadata.NewForConfig(opts.Config); err != nil {
		return nil, fmt.Errorf("build the metadata client: %w", err)
	}
	return a, nil
}

// Run starts the informers, the workers and the metrics server, and blocks until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if a.opts.InstallCRDs {
		if err := crds.Apply(ctx, a.opts.Config); err != nil {
			return fmt.Errorf("install the CRDs (--install-crds): %w", err)
		}
	}
	if err := a.publishVersions(ctx); err != nil {
		return err
	}
	stopEvents := a.startEvents()
	defer stopEvents()
	a.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[key](),
		workqueue.TypedRateLimitingQueueConfig[key]{Name: "slipway-agent"})
	defer a.queue.ShutDown()
	if err := a.startInformers(ctx); err != nil {
		return err
	}
	if a.opts.MetricsAddr != "" {
		go a.serveMetrics(ctx)
	}
	a.log.Info("agent started", "namespace", a.opts.Namespace, "systemDir", a.opts.SystemDir)
	var wg sync.WaitGroup
	for range 3 { // node and fleet work of a channel run side by side; a key never runs twice at once
		wg.Add(1)
		go func() { defer wg.Done(); a.work(ctx) }()
	}
	<-ctx.Done()
	a.queue.ShutDown()
	a.stopElections()
	wg.Wait()
	return nil
}

func (a *Agent) startEvents() func() {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1.AddToScheme(scheme)
	b := record.NewBroadcasterWithCorrelatorOptions(record.CorrelatorOptions{BurstSize: 100, QPS: 1})
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: a.kube.CoreV1().Events(a.opts.Namespace)})
	a.recorder = b.NewRecorder(scheme, corev1.EventSource{Component: "slipway-agent", Host: a.opts.NodeName})
	return b.Shutdown
}

func (a *Agent) startInformers(ctx context.Context) error {
	opsf := opsinformers.NewSharedInformerFactoryWithOptions(a.ops, a.opts.Resync, opsinformers.WithNamespace(a.opts.Namespace))
	chInf := opsf.Ops().V1().UpdateChannels()
	a.channels = chInf.Lister()
	_, err := chInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { a.channelChanged(o) },
		UpdateFunc: func(_, o any) { a.channelChanged(o) },
		DeleteFunc: func(o any) { a.channelDeleted(o) },
	})
	if err != nil {
		return err
	}
	own := kubeinformers.NewSharedInformerFactoryWithOptions(a.kube, a.opts.Resync,
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", a.opts.NodeName).String()
		}))
	nodeInf := own.Core().V1().Nodes().Informer()
	a.nodes = nodeInf.GetIndexer()
	jobf := kubeinformers.NewSharedInformerFactoryWithOptions(a.kube, a.opts.Resync, kubeinformers.WithNamespace(a.opts.Namespace),
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.SelectorFromSet(labels.Set{LabelJobNode: LabelValue(a.opts.NodeName)}).String()
		}))
	jobInf := jobf.Batch().V1().Jobs().Informer()
	a.jobs = jobInf.GetIndexer()
	all := func(any) { a.enqueueAll(roleNode) }
	if _, err := nodeInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: all, UpdateFunc: func(_, o any) { all(o) }}); err != nil {
		return err
	}
	jobChanged := func(o any) {
		if j, ok := o.(*batchv1.Job); ok {
			a.queue.Add(key{roleNode, j.Labels[LabelJobChannel]})
		}
	}
	if _, err := jobInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: jobChanged, UpdateFunc: func(_, o any) { jobChanged(o) }}); err != nil {
		return err
	}
	podInf := a.newPodInformer()
	a.pods = podInf.GetStore()
	podChanged := func(o any) {
		if p, ok := o.(*corev1.Pod); ok && p.Status.Phase == corev1.PodSucceeded {
			a.queue.Add(key{roleNode, p.Labels[LabelJobChannel]})
		}
	}
	if _, err := podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: podChanged, UpdateFunc: func(_, o any) { podChanged(o) }}); err != nil {
		return err
	}
	opsf.Start(ctx.Done())
	own.Start(ctx.Done())
	jobf.Start(ctx.Done())
	go podInf.RunWithContext(ctx)
	for _, synced := range []cache.InformerSynced{chInf.Informer().HasSynced, nodeInf.HasSynced, jobInf.HasSynced, podInf.HasSynced} {
		if !cache.WaitForCacheSync(ctx.Done(), synced) {
			return fmt.Errorf("the informers did not sync: is the API server reachable and the CRD installed (--install-crds)?")
		}
	}
	return nil
}

func (a *Agent) channelChanged(o any) {
	ch, ok := o.(*v1.UpdateChannel)
	if !ok {
		return
	}
	a.ensureElection(ch.Name)
	a.queue.Add(key{roleNode, ch.Name})
	a.queue.Add(key{roleFleet, ch.Name})
}

func (a *Agent) channelDeleted(o any) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	if ch, ok := o.(*v1.UpdateChannel); ok {
		a.stopElection(ch.Name)
		a.queue.Add(key{roleNode, ch.Name}) // uncordon if this node was in its slots
	}
}

func (a *Agent) enqueueAll(r role) {
	list, err := a.channels.UpdateChannels(a.opts.Namespace).List(labels.Everything())
	if err != nil {
		return
	}
	for _, ch := range list {
		a.queue.Add(key{r, ch.Name})
	}
}

func (a *Agent) work(ctx context.Context) {
	for {
		k, quit := a.queue.Get()
		if quit {
			return
		}
		var after time.Duration
		var err error
		if k.role == roleFleet {
			after, err = a.syncFleet(ctx, k.channel)
		} else {
			after, err = a.syncNode(ctx, k.channel)
		}
		switch {
		case err != nil && ctx.Err() == nil:
			a.log.Warn("sync failed; retrying", "channel", k.channel, "role", k.role, "err", err)
			a.queue.AddRateLimited(k)
		default:
			a.queue.Forget(k)
			if after > 0 {
				a.queue.AddAfter(k, after)
			}
		}
		a.queue.Done(k)
	}
}

func (a *Agent) serveMetrics(ctx context.Context) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(a.metrics.registry, promhttp.HandlerOpts{}))
	srv := &http.Server{Addr: a.opts.MetricsAddr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		a.log.Error("metrics server stopped", "addr", a.opts.MetricsAddr, "err", err)
	}
}

// ownNode returns this agent's Node from its informer (nil when not seen).
func (a *Agent) ownNode() *corev1.Node {
	o, ok, _ := a.nodes.GetByKey(a.opts.NodeName)
	if !ok {
		return nil
	}
	n, _ := o.(*corev1.Node)
	return n
}
