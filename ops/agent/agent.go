package agent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	opsclient "slipway.dev/slipway/ops/generated/clientset/versioned/typed/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/health"
	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/process"
	"slipway.dev/slipway/ops/protocol"
)

// Agent is one running agent. Handlers only enqueue; the syncs are keyed by
// role and channel name and are idempotent.
type Agent struct {
	opts Options
	log  *slog.Logger
	kube *kube.Clientset
	// guard: the Rebooter confirms the node's slot with the API server (guard.go).
	guard   *slotGuard
	meta    metadata.Interface
	ops     opsclient.OpsV1Interface
	objects cache.Indexer // this agent's own NodeUpdate only (nodeupdate.go)
	// watches: the watches of this agent's own Node, its node's Jobs and
	// their pods, open while it has work (workwatch.go); runCtx is the
	// agent's run, which they live in.
	watches  *workWatches
	runCtx   context.Context
	queue    workqueue.TypedRateLimitingInterface[key]
	recorder record.EventRecorder
	metrics  *metrics

	// beatLease is the heartbeat Lease as this process last wrote it
	// (heartbeat.go; the heartbeat's goroutine only).
	beatLease *coordinationv1.Lease
	// beatingIdle: the last renewal waits the idle interval; beatWake
	// renews at once (wakeHeartbeat).
	beatingIdle atomic.Bool
	beatWake    chan struct{}

	probe       *health.Probe // /healthz and /readyz (process.Pulse)
	workersBeat func()

	// reporting serializes the report writes: where they go (the Node or
	// the NodeUpdate) does not change under one (nodeupdate.go).
	reporting sync.Mutex

	mu              sync.Mutex
	rebooting       bool      // a reboot was requested by this process and has not failed
	rebootAt        time.Time // when this process last requested the reboot
	escalating      bool      // a forced reboot is armed (reboot.go)
	rebootFor       types.UID // the channel whose slot the reboot was requested for
	wroteRebootFrom string    // the boot ID this process recorded on its Node before Rebooting
	drained         string    // what this process's drain did, for the Rebooting Event
	rolledBack      bool      // this process created a rollback Job; publish when it is done
	notReadyAt      time.Time // when this process first saw its node not Ready after a reboot
	swappedAt       time.Time // when this process first saw its activation swapped while the drain went on (beside.go)
	waitSince       map[string]time.Time
	wrote           map[types.UID]v1.Slot // per channel UID: this node's slot as this agent last wrote it
	created         map[string]time.Time  // Jobs this process created that its cache may not show yet
	reported        protocol.Reports      // the reports this process last wrote on its Node or NodeUpdate (report.go)
	announced       types.UID             // the NodeUpdate in which this process announced that it reports there (nodeupdate.go)
	marks           map[string]string     // the prestage marks this process last wrote in its NodeUpdate, by status field
	wroteVersions   statusWritten         // the versions this process last wrote in its NodeUpdate's status (publish.go)
	known           Versions              // the versions this agent published for its node's boot
	knownBoot       string                // the boot ID known belongs to
	hasKnown        bool

	// rollbackFailed: failed rollback Jobs this process reported (rollback.go).
	rollbackFailed map[string]bool
}

// key is a unit of work: one role's sync of one channel.
type key struct {
	role    role
	channel string
}

type role int

const (
	roleNode        role = iota // drive this node's own slot
	rolePublish                 // label the node with its versions again if it lacks them (no channel)
	roleIdle                    // uncordon this node if slipway cordoned it and no channel holds it (no channel)
	roleAnnounce                // announce in its NodeUpdate that it reads and reports there (no channel)
	rolePulse                   // a pulse: the worker that takes it beats the workers' loop (process.Pulse)
	roleWorkWatches             // close the Job and pod watches if the node has had no work for a while (no channel)
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
	a := &Agent{opts: opts, log: opts.Log.With("node", opts.NodeName), metrics: newMetrics(), probe: health.New(),
		waitSince: map[string]time.Time{}, wrote: map[types.UID]v1.Slot{}, created: map[string]time.Time{}, marks: map[string]string{},
		beatWake: make(chan struct{}, 1), watches: closedWork(opts.NodeName)}
	if a.kube, err = kube.NewForConfig(opts.Config); err != nil {
		return nil, fmt.Errorf("build the Kubernetes client: %w", err)
	}
	a.guard = &slotGuard{a: a}
	a.opts.Rebooter = &guardedRebooter{g: a.guard, next: opts.Rebooter}
	if a.meta, err = metadata.NewForConfig(opts.Config); err != nil {
		return nil, fmt.Errorf("build the metadata client: %w", err)
	}
	if a.ops, err = opsclient.NewForConfig(opts.Config); err != nil {
		return nil, fmt.Errorf("build the NodeUpdate client: %w", err)
	}
	return a, nil
}

// Run starts the informers, the workers and the metrics server, and blocks until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The probes first: an agent waiting for a supported API server (it
	// asks again every few minutes) is alive, and not ready until its
	// informers are; served later, the liveness probe would restart it
	// into CrashLoopBackOff.
	var started atomic.Bool
	a.probe.ReadyWhen("started", started.Load)
	if a.opts.MetricsAddr != "" {
		go process.ServeMetrics(ctx, a.opts.MetricsAddr, a.metrics.registry, a.probe, a.log)
	}
	if err := untilAnswered(ctx, a.log, startBackoff, "ask the API server's version (and install the CRDs with --install-crds)", func(ctx context.Context) error {
		return process.Prepare(ctx, a.kube, a.opts.Config, a.opts.InstallCRDs, a.log)
	}); err != nil {
		return err
	}
	recorder, stopEvents, err := kube.Recorder{Namespace: a.opts.Namespace, Component: "slipway-agent", Host: a.opts.NodeName,
		AddToScheme: []func(*runtime.Scheme) error{v1.AddToScheme}}.Start(a.kube)
	if err != nil {
		return err
	}
	defer stopEvents()
	a.recorder = recorder
	a.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[key](),
		workqueue.TypedRateLimitingQueueConfig[key]{Name: "slipway-agent"})
	defer a.queue.ShutDown()
	a.workersBeat = process.Pulse(ctx, a.probe, a.opts.LoopAllowance, func() { a.queue.Add(key{role: rolePulse}) })
	// The versions' publish beside the informers' first lists (start.go),
	// then the heartbeat: the controller's fleet view skips nodes whose
	// agent never reported, and reads a node that reports with its versions
	// published. The heartbeat waits for the caches too: its first renewal
	// says whether a channel asks something of the node (busy), which an
	// empty cache would deny, and a renewal at the idle duration would be
	// followed at once by the busy one the caches' first events wake: two
	// writes at every start, every reboot, where one does.
	published := make(chan error, 1)
	go func() {
		published <- untilAnswered(ctx, a.log, startBackoff, "publish this boot's versions", a.publishVersions)
	}()
	if err := a.startInformers(ctx); err != nil {
		return err
	}
	if err := <-published; err != nil {
		return err
	}
	go a.heartbeat(ctx)
	a.queue.Add(key{role: roleIdle}) // a cordon left by a channel deleted while this agent was away
	started.Store(true)
	go a.sweepSlotPodsEvery(ctx) // as the TTL controller does for Jobs (slotpod.go)
	a.log.Info("agent started", "namespace", a.opts.Namespace, "systemDir", a.opts.SystemDir)
	var wg sync.WaitGroup
	for range 2 { // a key never runs twice at once
		wg.Add(1)
		go func() { defer wg.Done(); a.work(ctx) }()
	}
	<-ctx.Done()
	a.queue.ShutDown()
	wg.Wait()
	return nil
}

// startInformers starts the cache of this agent's own NodeUpdate (where
// the controller writes what the node needs of each channel: no agent
// watches the channels) and the work watches (its Node, its node's upgrade
// Jobs and their pods: workwatch.go), and waits until they are filled.
func (a *Agent) startInformers(ctx context.Context) error {
	a.runCtx = ctx // the work watches' too, whenever they open (workwatch.go)
	var informers []cache.SharedIndexInformer
	if !a.opts.NodeOnly {
		objInf := a.nodeUpdateInformer()
		a.objects = objInf.GetIndexer()
		if _, err := objInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(o any) { a.nodeChanged(o); a.queue.Add(key{role: roleAnnounce}) },
			UpdateFunc: func(old, cur any) {
				a.objectViewsGone(old, cur)
				a.protocolMoved(old, cur)
				a.nodeChanged(cur)
				a.queue.Add(key{role: roleAnnounce})
			},
		}); err != nil {
			return err
		}
		informers = append(informers, objInf)
	}
	process.ReadyWhen(a.probe, informers...)
	for _, inf := range informers {
		go inf.RunWithContext(ctx)
	}
	// The work watches open at start, whatever the node's work: a Job the
	// last process left running is seen before any decision.
	a.watches.mu.Lock()
	a.openWork()
	a.watches.mu.Unlock()
	if !process.WaitSynced(ctx, informers...) {
		return errInformersUnsynced
	}
	if !a.waitWork(ctx) {
		return errInformersUnsynced
	}
	return nil
}

var errInformersUnsynced = fmt.Errorf("the informers did not sync: is the API server reachable and the CRD installed (--install-crds)?")

// nodeInformer watches this agent's own Node only.
func (a *Agent) nodeInformer() cache.SharedIndexInformer {
	return process.NewInformerWatching(a.kube.CoreV1().Nodes(), &corev1.Node{}, a.opts.Resync, process.AgentWatch, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", a.opts.NodeName).String()
	})
}

// jobInformer watches the upgrade Jobs of this agent's node.
func (a *Agent) jobInformer() cache.SharedIndexInformer {
	return process.NewInformerWatching(a.kube.BatchV1().Jobs(a.opts.Namespace), &batchv1.Job{}, a.opts.Resync, process.AgentWatch, func(o *metav1.ListOptions) {
		o.LabelSelector = labels.SelectorFromSet(labels.Set{protocol.LabelJobNode: protocol.LabelValue(a.opts.NodeName)}).String()
	})
}

// viewsGone ends this process's memory of the slots of the channels whose
// view left its Node (the channel deleted or made invalid, or the node no
// longer concerned), and syncs them: the node uncordons if it was in
// their slots.
func (a *Agent) viewsGone(old, cur any) {
	o, ok1 := old.(*corev1.Node)
	n, ok2 := cur.(*corev1.Node)
	if !ok1 || !ok2 {
		return
	}
	now := a.viewsOf(n.Annotations)
	for uid, v := range a.viewsOf(o.Annotations) {
		if _, still := now[uid]; !still {
			a.forgetSlot(uid)
			a.queue.Add(key{roleNode, v.Name})
		}
	}
}

// enqueueAll queues the sync of every channel this node's views name.
func (a *Agent) enqueueAll() {
	list, err := a.listChannels()
	if err != nil {
		return
	}
	for _, ch := range list {
		a.queue.Add(key{roleNode, ch.Name})
	}
}

func (a *Agent) work(ctx context.Context) {
	process.Work(ctx, a.queue, a.sync, func(k key, err error) {
		a.log.Warn("sync failed; retrying", "channel", k.channel, "role", k.role, "err", err)
	})
}

// sync does one unit of work.
func (a *Agent) sync(ctx context.Context, k key) (time.Duration, error) {
	switch k.role {
	case rolePulse:
		a.workersBeat()
		return 0, nil
	case rolePublish:
		return 0, a.republish(ctx)
	case roleIdle:
		return 0, a.cleanupIdle(ctx)
	case roleAnnounce:
		return 0, a.announce(ctx)
	case roleWorkWatches:
		a.closeIdleWork()
		return 0, nil
	}
	return a.syncNode(ctx, k.channel)
}

// ownNode returns this agent's Node from its informer (nil when not seen,
// or while the work watches are closed: workwatch.go).
func (a *Agent) ownNode() *corev1.Node {
	o, ok, _ := a.nodeCache().GetByKey(a.opts.NodeName)
	if !ok {
		return nil
	}
	n, _ := o.(*corev1.Node)
	return n
}
