package agent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	opsclient "slipway.dev/slipway/ops/generated/clientset/versioned/typed/ops.slipway.dev/v1"
	opslisters "slipway.dev/slipway/ops/generated/listers/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/health"
	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/lease"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/version"
)

// The controller, `slipway ops controller` (a Deployment): the fleet view
// of every channel of its namespace, which no node's agent does any more.
// Its replicas compete for one Lease (protocol.ControllerLease); the holder
// validates the channels, polls `latest`, resolves GitHub releases (the
// only reader of the token Secret), recovers stale slots, grants slots and
// staging permits and writes the channels' status. It watches the
// channels only; it reads Nodes as metadata lists and single GETs, the
// agents' heartbeat Leases and the slots' Jobs by name.

// The controller's client rate unless its kubeconfig sets one: it writes
// every node's channel view when a channel's spec or target changes.
const (
	controllerQPS   = 50
	controllerBurst = 100
)

// ControllerOptions configure the controller.
type ControllerOptions struct {
	// Identity names this replica in the Lease and in status.polling (required; the pod's name).
	Identity string
	// Namespace holds the UpdateChannels, Leases and Events (default slipway-system).
	Namespace string
	// Config reaches the API server (required).
	Config *rest.Config
	// InstallCRDs creates or updates the CRDs at start.
	InstallCRDs bool
	// MetricsAddr serves Prometheus metrics at /metrics ("" = off).
	MetricsAddr string
	// GitHubToken authenticates github-releases:// polls of channels without a tokenSecretRef.
	GitHubToken string
	// GitHubBaseURL replaces https://api.github.com/ (GitHub Enterprise, tests).
	GitHubBaseURL string
	// Retry is the backoff for failed nodes (default plan.DefaultRetry).
	Retry plan.Retry
	// Resync re-reads the fleet view at least this often (default 30s).
	Resync time.Duration
	// LeaseDuration of the controller's Lease (default 15s; renew at 2/3, retry at 1/5).
	LeaseDuration time.Duration
	// HeartbeatInterval is the agents' (default 1m): a node whose agent
	// missed three renewals gets no slot.
	HeartbeatInterval time.Duration
	// LoopAllowance is how long the worker may go without a pulse before
	// /healthz fails (default 2m).
	LoopAllowance time.Duration
	// Log receives structured logs (default slog.Default()).
	Log *slog.Logger
}

// RunController runs the controller until ctx ends.
func RunController(ctx context.Context, o ControllerOptions) error {
	a, err := newController(o)
	if err != nil {
		return err
	}
	return a.runController(ctx)
}

// noReboot stands in for the Rebooter the controller never calls.
type noReboot struct{}

func (noReboot) Reboot(context.Context) error { return fmt.Errorf("the controller reboots no node") }
func (noReboot) String() string               { return "none" }

// newController builds the controller's Agent: its writes fenced by the
// Lease's tenure, its elector on a client of its own.
func newController(o ControllerOptions) (*Agent, error) {
	if o.Identity == "" {
		return nil, fmt.Errorf("the controller needs a name of its own for its Lease: set --identity or POD_NAME (the Deployment passes metadata.name)")
	}
	if o.Config == nil {
		return nil, fmt.Errorf("the controller needs a connection to the API server: run it in the cluster or pass --kubeconfig")
	}
	cfg := rest.CopyConfig(o.Config)
	if cfg.UserAgent == "" {
		cfg.UserAgent = fmt.Sprintf("slipway-controller/%s pod/%s", version.Version, o.Identity)
	}
	if cfg.QPS == 0 && cfg.RateLimiter == nil { // client-go's 5/s would make a spec change of 1000 nodes' views take minutes
		cfg.QPS, cfg.Burst = controllerQPS, controllerBurst
	}
	opts, err := Options{NodeName: o.Identity, Namespace: o.Namespace, Config: cfg, InstallCRDs: o.InstallCRDs, MetricsAddr: o.MetricsAddr,
		GitHubToken: o.GitHubToken, GitHubBaseURL: o.GitHubBaseURL, Retry: o.Retry, Resync: o.Resync, LeaseDuration: o.LeaseDuration,
		HeartbeatInterval: o.HeartbeatInterval, LoopAllowance: o.LoopAllowance, Log: o.Log, Rebooter: noReboot{}}.withDefaults()
	if err != nil {
		return nil, err
	}
	a := &Agent{opts: opts, log: opts.Log.With("controller", o.Identity), metrics: newMetrics(), probe: health.New(), controller: true, tenure: &lease.Tenure{},
		fleet: map[string]*fleetCache{}, waitSince: map[string]time.Time{}, views: map[types.UID]map[string]string{}, drains: map[string]*drainRun{}}
	a.metrics.registry.MustRegister(newCordonMetrics(a))
	if a.leaseKube, err = kube.NewForConfig(opts.Config); err != nil {
		return nil, fmt.Errorf("build the Lease client: %w", err)
	}
	fenced := rest.CopyConfig(opts.Config)
	fenced.Wrap(a.tenure.WrapTransport)
	if a.kube, err = kube.NewForConfig(fenced); err != nil {
		return nil, fmt.Errorf("build the Kubernetes client: %w", err)
	}
	if a.drainKube, err = drainClient(fenced); err != nil {
		return nil, fmt.Errorf("build the drain's client: %w", err)
	}
	if a.ops, err = opsclient.NewForConfig(fenced); err != nil {
		return nil, fmt.Errorf("build the UpdateChannel client: %w", err)
	}
	if a.meta, err = metadata.NewForConfig(opts.Config); err != nil {
		return nil, fmt.Errorf("build the metadata client: %w", err)
	}
	return a, nil
}

// runController watches the channels, competes for the Lease and does the
// fleet view of every channel while it holds it.
func (a *Agent) runController(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := a.prepareServer(ctx); err != nil {
		return err
	}
	recorder, stopEvents, err := kube.Recorder{Namespace: a.opts.Namespace, Component: "slipway-controller", Host: a.opts.NodeName,
		AddToScheme: []func(*runtime.Scheme) error{v1.AddToScheme}}.Start(a.kube)
	if err != nil {
		return err
	}
	defer stopEvents()
	a.recorder = recorder
	a.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[key](),
		workqueue.TypedRateLimitingQueueConfig[key]{Name: "slipway-controller"})
	defer a.queue.ShutDown()
	a.viewQueue = newViewQueue(a.slotNodes.holds)
	defer a.viewQueue.ShutDown()
	a.startProbe(ctx)
	chInf := a.channelInformer()
	a.channels = opslisters.NewUpdateChannelLister(chInf.GetIndexer())
	changed := func(o any) {
		if ch, ok := o.(*v1.UpdateChannel); ok && a.elected.Load() {
			a.queue.Add(key{roleFleet, ch.Name})
		}
	}
	if _, err := chInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: changed, UpdateFunc: func(_, o any) { changed(o) }, DeleteFunc: a.forgetChannel,
	}); err != nil {
		return err
	}
	nodeInf, err := a.reportInformer()
	if err != nil {
		return err
	}
	a.readyWhen(chInf, nodeInf)
	go chInf.RunWithContext(ctx)
	go nodeInf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), chInf.HasSynced, nodeInf.HasSynced) {
		return fmt.Errorf("the channel and node informers did not sync: is the API server reachable and the CRD installed (--install-crds)?")
	}
	if a.opts.MetricsAddr != "" {
		go a.serveMetrics(ctx)
	}
	elected := make(chan struct{})
	go func() { defer close(elected); a.elect(ctx) }()
	a.log.Info("controller started", "namespace", a.opts.Namespace)
	worked := make(chan struct{}) // one worker: one channel at a time, the server slot is decided across channels (servers.go)
	go func() { defer close(worked); a.work(ctx) }()
	var viewsDone sync.WaitGroup
	for range viewWorkers {
		viewsDone.Add(1)
		go func() { defer viewsDone.Done(); a.workViews(ctx) }()
	}
	<-ctx.Done()
	a.queue.ShutDown()
	a.viewQueue.ShutDown()
	<-worked
	viewsDone.Wait()
	<-elected // the Lease released: another replica takes over at once
	return nil
}

// forgetChannel drops what the fleet view remembers of a deleted channel.
func (a *Agent) forgetChannel(o any) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	if ch, ok := o.(*v1.UpdateChannel); ok {
		a.mu.Lock()
		delete(a.fleet, ch.Name)
		delete(a.lastWritten, ch.Name)
		a.mu.Unlock()
		a.ahead.forget(ch.Name)
		a.dropViews(ch.UID) // its nodes' agents see it gone, and uncordon
		if a.elected.Load() {
			a.queue.Add(key{role: roleSweep}) // what it cordoned for that channel
		}
	}
}
