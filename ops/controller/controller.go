// Package controller is the UpdateChannel controller, `slipway ops
// controller` (a Deployment): the fleet view of every channel of its
// namespace. Its replicas compete for one Lease (protocol.ControllerLease);
// the holder validates the channels, polls `latest`, resolves GitHub
// releases (the only reader of the token Secret), recovers stale slots,
// checks the nodes next in line, grants slots and staging permits, folds
// the nodes' slot reports into the channels' status, and writes each node
// its view of every channel that concerns it (protocol.View, on the node's
// own Node). It drains: a node that reports its slot Draining is cordoned
// and drained by the controller, which then marks the slot Rebooting in
// the node's view; the node's agent (ops/agent) reboots. It watches the
// channels and the Nodes' metadata; it reads single Nodes, the agents'
// heartbeat Leases and the slots' Jobs by name. Decisions live in
// ops/plan; this package wires them to the API.
package controller

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	opsclient "slipway.dev/slipway/ops/generated/clientset/versioned/typed/ops.slipway.dev/v1"
	opslisters "slipway.dev/slipway/ops/generated/listers/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/health"
	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/lease"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/process"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/version"
)

// The controller's client rate unless its kubeconfig sets one: it writes
// every node's channel view when a channel's spec or target changes.
const (
	controllerQPS   = 50
	controllerBurst = 100
)

// Options configure the controller.
type Options struct {
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
	// ProfileAddr serves the Go runtime's profiles at /debug/pprof/ ("" = off).
	ProfileAddr string
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
	// Protocol is the highest NodeUpdate protocol the controller speaks
	// with the agents (default protocol.Protocol).
	// protocol.NodeUpdateProtocol (2) is the release that leaves the
	// agents' versions on their Nodes (for tests of the upgrade of slipway).
	Protocol int
}

func (o Options) withDefaults() (Options, error) {
	if o.Identity == "" {
		return o, fmt.Errorf("the controller needs a name of its own for its Lease: set --identity or POD_NAME (the Deployment passes metadata.name)")
	}
	if o.Config == nil {
		return o, fmt.Errorf("the controller needs a connection to the API server: run it in the cluster or pass --kubeconfig")
	}
	if o.Namespace == "" {
		o.Namespace = "slipway-system"
	}
	if o.Retry.Base <= 0 {
		o.Retry = plan.DefaultRetry
	}
	var err error
	if o.Protocol, err = protocol.Spoken(o.Protocol); err != nil {
		return o, fmt.Errorf("the controller: %w", err)
	}
	process.Timings(&o.Resync, &o.LeaseDuration, &o.HeartbeatInterval, &o.LoopAllowance)
	if o.Log == nil {
		o.Log = slog.Default()
	}
	o.Config = process.ClientConfig(o.Config, fmt.Sprintf("slipway-controller/%s pod/%s", version.Version, o.Identity))
	if o.Config.QPS == 0 && o.Config.RateLimiter == nil { // client-go's 5/s would make a spec change of 1000 nodes' views take minutes
		o.Config.QPS, o.Config.Burst = controllerQPS, controllerBurst
	}
	return o, nil
}

// Controller is one running replica of the controller. Handlers only
// enqueue; the passes are keyed by role and channel name and are idempotent.
type Controller struct {
	opts Options
	log  *slog.Logger
	// kube, drainKube and ops are fenced by tenure (lease.Tenure): no write
	// leaves a replica that lost its Lease. drainKube evicts, each eviction
	// confirming its slot (drainclient.go); leaseKube renews the Lease.
	kube      *kube.Clientset
	drainKube *kube.Clientset
	// disrupting is read-held by each eviction and pod deletion being
	// sent: a stopping controller waits for them (drainclient.go).
	disrupting sync.RWMutex
	leaseKube  *kube.Clientset
	ops        opsclient.OpsV1Interface
	tenure     *lease.Tenure
	elected    atomic.Bool
	channels   opslisters.UpdateChannelLister
	// nodes are every Node, stripped to its metadata, Ready condition and
	// unschedulable flag (nodeInformer, availability.go).
	nodes cache.Store
	// nodeUpdates are the namespace's NodeUpdates (nodeupdates.go).
	nodeUpdates cache.Store
	queue       workqueue.TypedRateLimitingInterface[key]
	recorder    record.EventRecorder
	metrics     *metrics

	// views are the nodes' views the controller wants, by channel UID and
	// node (views.go); viewQueue the nodes whose views it writes.
	views     map[types.UID]map[string]string
	viewQueue workqueue.TypedRateLimitingInterface[string]
	// slotNodes are the nodes holding a slot: their views are written first (viewqueue.go).
	slotNodes slotHolderSet
	// viewWrites are the controller's last view write on each Node (views.go),
	// objectWrites on each NodeUpdate (nodeupdates.go).
	viewWrites   map[string]viewsWritten
	objectWrites map[string]objectWritten
	// memo holds the view comparisons' last answers (viewmemo.go).
	memo viewMemo
	// drains are the controller's drains under way, by node (ctrldrain.go);
	// leaderCtx ends when it loses the Lease (nil while it does not hold it).
	drains map[string]*drainRun
	// drainsDone are the drains done whose slots the next pass marks
	// Rebooting, by node (ctrldrain.go).
	drainsDone map[string]drainRun
	// heldServers are the server steps (drain, reboot) another server holds back, by node (serverstep.go).
	heldServers map[string]heldServer
	// ahead are the checks of the nodes next in line, made in the background (health.go).
	ahead      checksAhead
	beats      heartbeats // the agents' heartbeats as this controller saw them change (heartbeats.go)
	notReady   heartbeats // the slots' nodes' Ready transitions, as this controller saw them change (the same clock)
	leaderCtx  context.Context
	leaderStop context.CancelFunc

	probe       *health.Probe // /healthz and /readyz
	workersBeat func()

	mu          sync.Mutex
	fleet       map[string]*fleetCache       // by channel
	claims      map[string]time.Time         // the claim time of the last slot it granted each node (plan.SpaceClaims)
	lastWritten map[string]*v1.UpdateChannel // each channel as its last status write returned it (status.go)
}

// key is a unit of work: one role's pass over one channel.
type key struct {
	role    role
	channel string
}

type role int

const (
	roleFleet role = iota // the fleet view of a channel (while this replica holds the Lease)
	roleSweep             // uncordon the nodes it cordoned for slots no channel holds (no channel)
	rolePulse             // a pulse: the worker that takes it beats the workers' loop (process.Pulse)
)

// Run runs the controller until ctx ends.
func Run(ctx context.Context, o Options) error {
	c, err := newController(o)
	if err != nil {
		return err
	}
	return c.run(ctx)
}

// newController builds the controller: its writes fenced by the Lease's
// tenure, its elector on a client of its own.
func newController(o Options) (*Controller, error) {
	opts, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	ctl := &Controller{opts: opts, log: opts.Log.With("controller", opts.Identity), metrics: newMetrics(), probe: health.New(), tenure: &lease.Tenure{},
		fleet: map[string]*fleetCache{}, views: map[types.UID]map[string]string{}, drains: map[string]*drainRun{},
		objectWrites: map[string]objectWritten{}}
	ctl.metrics.registry.MustRegister(newCordonMetrics(ctl))
	if ctl.leaseKube, err = kube.NewForConfig(opts.Config); err != nil {
		return nil, fmt.Errorf("build the Lease client: %w", err)
	}
	fenced := rest.CopyConfig(opts.Config)
	fenced.Wrap(ctl.tenure.WrapTransport)
	if ctl.kube, err = kube.NewForConfig(fenced); err != nil {
		return nil, fmt.Errorf("build the Kubernetes client: %w", err)
	}
	if ctl.drainKube, err = drainClient(fenced, &ctl.disrupting); err != nil {
		return nil, fmt.Errorf("build the drain's client: %w", err)
	}
	if ctl.ops, err = opsclient.NewForConfig(fenced); err != nil {
		return nil, fmt.Errorf("build the UpdateChannel client: %w", err)
	}
	return ctl, nil
}

// run watches the channels, competes for the Lease and does the fleet
// view of every channel while it holds it.
func (ctl *Controller) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := process.Prepare(ctx, ctl.kube, ctl.opts.Config, ctl.opts.InstallCRDs, ctl.log); err != nil {
		return err
	}
	recorder, stopEvents, err := kube.Recorder{Namespace: ctl.opts.Namespace, Component: "slipway-controller", Host: ctl.opts.Identity,
		AddToScheme: []func(*runtime.Scheme) error{v1.AddToScheme}}.Start(ctl.kube)
	if err != nil {
		return err
	}
	defer stopEvents()
	ctl.recorder = recorder
	ctl.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[key](),
		workqueue.TypedRateLimitingQueueConfig[key]{Name: "slipway-controller"})
	defer ctl.queue.ShutDown()
	ctl.viewQueue = newViewQueue(ctl.slotNodes.holds)
	defer ctl.viewQueue.ShutDown()
	ctl.workersBeat = process.Pulse(ctx, ctl.probe, ctl.opts.LoopAllowance, func() { ctl.queue.Add(key{role: rolePulse}) })
	chInf := process.NewInformer(ctl.ops.UpdateChannels(ctl.opts.Namespace), &v1.UpdateChannel{}, ctl.opts.Resync, func(*metav1.ListOptions) {})
	ctl.channels = opslisters.NewUpdateChannelLister(chInf.GetIndexer())
	changed := func(o any) {
		if ch, ok := o.(*v1.UpdateChannel); ok && ctl.elected.Load() {
			ctl.queue.Add(key{roleFleet, ch.Name})
		}
	}
	if _, err := chInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: changed, UpdateFunc: func(_, o any) { changed(o) }, DeleteFunc: ctl.forgetChannel,
	}); err != nil {
		return err
	}
	nodeInf, err := ctl.nodeInformer()
	if err != nil {
		return err
	}
	objInf, err := ctl.nodeUpdateInformer()
	if err != nil {
		return err
	}
	process.ReadyWhen(ctl.probe, chInf, nodeInf, objInf)
	go chInf.RunWithContext(ctx)
	go nodeInf.RunWithContext(ctx)
	go objInf.RunWithContext(ctx)
	if !process.WaitSynced(ctx, chInf, nodeInf, objInf) {
		return fmt.Errorf("the channel and node informers did not sync: is the API server reachable and the CRD installed (--install-crds)?")
	}
	if err := process.ServeProfiles(ctx, ctl.opts.ProfileAddr, ctl.log); err != nil {
		return fmt.Errorf("serve profiles (--pprof-addr): %w", err)
	}
	if ctl.opts.MetricsAddr != "" {
		go process.ServeMetrics(ctx, ctl.opts.MetricsAddr, ctl.metrics.registry, ctl.probe, ctl.log)
	}
	elected := make(chan struct{})
	go func() { defer close(elected); ctl.elect(ctx) }()
	ctl.log.Info("controller started", "namespace", ctl.opts.Namespace)
	worked := make(chan struct{}) // one worker: one channel at a time, the server slot is decided across channels (servers.go)
	go func() { defer close(worked); ctl.work(ctx) }()
	var viewsDone sync.WaitGroup
	for range viewWorkers {
		viewsDone.Add(1)
		go func() { defer viewsDone.Done(); ctl.workViews(ctx) }()
	}
	<-ctx.Done()
	ctl.queue.ShutDown()
	ctl.viewQueue.ShutDown()
	<-worked
	viewsDone.Wait()
	ctl.disrupting.Lock() // an eviction sent is not cut off (drainclient.go)
	defer ctl.disrupting.Unlock()
	<-elected // the Lease released: another replica takes over at once
	return nil
}

func (ctl *Controller) work(ctx context.Context) {
	process.Work(ctx, ctl.queue, ctl.sync, func(k key, err error) {
		ctl.log.Warn("sync failed; retrying", "channel", k.channel, "role", k.role, "err", err)
	})
}

// sync does one unit of work.
func (ctl *Controller) sync(ctx context.Context, k key) (time.Duration, error) {
	defer ctl.noteMemory(k)
	switch k.role {
	case rolePulse:
		ctl.workersBeat()
		return 0, nil
	case roleSweep:
		return ctl.sweep(ctx)
	}
	return ctl.syncFleet(ctx, k.channel)
}

// forgetChannel drops what the fleet view remembers of a deleted channel.
func (ctl *Controller) forgetChannel(o any) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	if ch, ok := o.(*v1.UpdateChannel); ok {
		ctl.mu.Lock()
		delete(ctl.fleet, ch.Name)
		delete(ctl.lastWritten, ch.Name)
		ctl.mu.Unlock()
		ctl.ahead.forget(ch.Name)
		ctl.dropViews(ch.UID) // its nodes' agents see it gone, and uncordon
		if ctl.elected.Load() {
			ctl.queue.Add(key{role: roleSweep}) // what it cordoned for that channel
		}
	}
}

// enqueueAll queues the fleet view of every channel.
func (ctl *Controller) enqueueAll() {
	list, err := ctl.listChannels()
	if err != nil {
		return
	}
	for _, ch := range list {
		ctl.queue.Add(key{roleFleet, ch.Name})
	}
}

// listChannels lists the namespace's channels from the informer.
func (ctl *Controller) listChannels() ([]*v1.UpdateChannel, error) {
	return ctl.channels.UpdateChannels(ctl.opts.Namespace).List(labels.Everything())
}

// channelRefs are the valid channels of the namespace (plan.Refs).
func (ctl *Controller) channelRefs() []plan.ChannelRef {
	list, err := ctl.listChannels()
	if err != nil {
		return nil
	}
	return plan.Refs(list)
}

// Defaults returns the Options defaults that have no natural zero value
// (Resync, LeaseDuration, Retry), for flag help.
func Defaults() Options {
	return Options{Resync: 30 * time.Second, LeaseDuration: 15 * time.Second, Retry: plan.DefaultRetry}
}
