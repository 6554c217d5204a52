package updateoperator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"slipway.dev/slipway/ops/analysis"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/health"
	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/lease"
)

// ControllerOptions configure `slipway update-operator controller`.
type ControllerOptions struct {
	Config    *rest.Config
	Prefix    string // default DefaultPrefix
	Policy    Policy
	NodeName  string // the node the controller runs on: updated last, alone
	Namespace string // of its Lease
	// LeaseName, when set, elects one leader among replicas through that Lease.
	LeaseName     string
	LeaseDuration time.Duration // default 15s
	Identity      string        // default the host name plus a random suffix
	// OSImagePattern selects the nodes that get the interface-version label
	// (default DefaultOSImagePattern; "-" labels none).
	OSImagePattern string
	// BeforeRebootChecks / AfterRebootChecks are annotations the before- /
	// after-reboot hooks set to "true" (FLUO style): while they run, the node
	// carries the label <prefix>/before-reboot (after-reboot) = true.
	BeforeRebootChecks, AfterRebootChecks []string
	// BlockingPods, a label selector: a node running a matching pod does not start an update.
	BlockingPods string
	Drain        drain.Options
	Resync       time.Duration // re-decide at least this often (default 10s)
	MetricsAddr  string
	// HealthAddr serves /healthz and /readyz (probes.go; "" = off);
	// HealthAllowance is how long a loop may go without a beat (default
	// controllerAllowance).
	HealthAddr      string
	HealthAllowance time.Duration
	// Analysis gates starts on the workloads' metrics (analysis.go).
	Analysis Analysis
	Log      *slog.Logger
}

func (o *ControllerOptions) defaults() error {
	if o.Config == nil {
		return errors.New("no Kubernetes configuration: pass --kubeconfig or run in a pod")
	}
	if o.LeaseDuration <= 0 {
		o.LeaseDuration = 15 * time.Second
	}
	if o.Identity == "" {
		h, _ := os.Hostname()
		o.Identity = h + "-" + rand.String(5)
	}
	if o.OSImagePattern == "" {
		o.OSImagePattern = DefaultOSImagePattern
	}
	if o.Resync <= 0 {
		o.Resync = 10 * time.Second
	}
	if o.Policy.MaxConcurrent <= 0 {
		o.Policy.MaxConcurrent = 1
	}
	if o.HealthAllowance <= 0 {
		o.HealthAllowance = controllerAllowance(o.Resync)
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if err := o.Analysis.Spec.Validate(); err != nil {
		return fmt.Errorf("analysis: %w", err)
	}
	if o.Prefix == BottlerocketPrefix || o.Prefix == TharPrefix {
		o.Policy.AdoptOldCordons = true // a cluster moving over from the old operator
	}
	o.Drain.IgnoreDaemonSets = true
	o.Drain.Flags = DrainFlags
	o.Drain.Log = o.Log
	// The controller's own pods stay: evicted from its own node, it would come
	// back there (it tolerates the cordon) and be evicted again.
	sel := "app.kubernetes.io/component!=" + ControllerComponent
	if o.Drain.PodSelector != "" {
		sel = o.Drain.PodSelector + "," + sel
	}
	o.Drain.PodSelector = sel
	return nil
}

// DefaultDrain is the controller's drain unless told otherwise: what the
// Bottlerocket update operator drains, every pod but DaemonSet and mirror
// pods (those with emptyDir volumes and those no controller owns
// included; `kubectl drain --delete-emptydir-data` refuses the latter
// without --force), each through the Eviction API, so PodDisruptionBudgets
// still guard them; nothing deleted at the timeout.
func DefaultDrain() drain.Options {
	return drain.Options{Timeout: 10 * time.Minute, DeleteEmptyDirData: true, EvictUnmanaged: true}
}

// DrainFlags name the controller's flags in its drain errors.
var DrainFlags = drain.Flags{IgnoreDaemonSets: "(DaemonSet pods are always left in place)", DeleteEmptyDirData: "--drain-delete-emptydir",
	Force: "--drain-force", EvictUnmanaged: "--drain-unmanaged"}

// ControllerComponent is the app.kubernetes.io/component label of the
// controller's pods.
const ControllerComponent = "update-operator-controller"

// controller is one running controller.
type controller struct {
	o      ControllerOptions
	keys   Keys
	kube   *kube.Clientset
	images *regexp.Regexp // nil: label no node
	ev     events
	m      *metrics
	poke   chan struct{}
	// With election, every write of kube is fenced by the Lease's tenure:
	// a leader that stalled (starved of CPU, its requests queued in a
	// loaded API server) must not start, drain or reboot a node once the
	// other replica may lead and act on the nodes as it sees them, or more
	// than max-concurrent would be disrupted. The elector writes the Lease
	// through leases, which is not fenced. Both nil without election.
	tenure *lease.Tenure
	leases *kube.Clientset
	// moved is signalled on every event of the Node informer: a turn
	// waiting for its cache to hold the controller's own writes (cache.go)
	// looks again then, instead of polling.
	moved chan struct{}
	mu    sync.Mutex
	// draining holds the drains under way (each one's cancel), drained the
	// drains this process finished for a node's perform-update (drains.go).
	draining map[string]context.CancelFunc
	drained  map[string]drainDone
	justDone map[string]*corev1.Node // this turn's, as written (sync.go: freed)
	// store is the informer's cache of the Nodes (nil: every turn lists);
	// written the resource version each Node written last was left at.
	store   cache.Store
	written map[string]int64
	// probe holds the loops' beats (probes.go); leading and synced say
	// whether this replica leads and its Node informer synced.
	probe           *health.Probe
	beat            func() // the decide loop's
	leading, synced atomic.Bool
	// fleet is the state that gates every node (fleet.go), written by the
	// controller only; halted the releases said halted already.
	fleet  *fleetState
	halted map[string]bool
	// lastResult is the analysis's last result (for lastWave), lastHold
	// the hold last logged: both the decide loop's only.
	lastResult *analysis.Result
	lastWave   []string
	lastHold   string
}

// RunController runs the controller until ctx ends. With a LeaseName, it
// decides only while it holds the Lease.
func RunController(ctx context.Context, o ControllerOptions) error {
	if err := o.defaults(); err != nil {
		return err
	}
	c, err := newController(o)
	if err != nil {
		return err
	}
	if err := c.m.serve(ctx, o.MetricsAddr, o.Log); err != nil {
		return fmt.Errorf("--metrics-addr: %w", err)
	}
	if err := serveProbes(ctx, o.HealthAddr, c.probe, o.Log); err != nil {
		return fmt.Errorf("--health-addr: %w", err)
	}
	defer c.ev.flush()
	if o.LeaseName == "" {
		return c.lead(ctx)
	}
	return c.elect(ctx)
}

func newController(o ControllerOptions) (*controller, error) {
	keys, err := NewKeys(o.Prefix)
	if err != nil {
		return nil, err
	}
	c := &controller{o: o, keys: keys, m: newMetrics(), poke: make(chan struct{}, 1), moved: make(chan struct{}, 1), draining: map[string]context.CancelFunc{}, drained: map[string]drainDone{}, justDone: map[string]*corev1.Node{}, written: map[string]int64{},
		probe: health.New()}
	c.beat = c.probe.Loop("decide", o.HealthAllowance)
	c.probe.ReadyWhen("the Node informer synced (while leading)", func() bool { return !c.leading.Load() || c.synced.Load() })
	if o.OSImagePattern != "-" {
		if c.images, err = regexp.Compile(o.OSImagePattern); err != nil {
			return nil, fmt.Errorf("--os-image-pattern %q is not a regular expression: %w", o.OSImagePattern, err)
		}
	}
	cfg := rest.CopyConfig(o.Config)
	cfg.UserAgent = componentController
	if cfg.QPS == 0 { // client-go's default, 5 per second, throttles a rollout's bursts of patches and Events
		cfg.QPS, cfg.Burst = 50, 100
	}
	if o.LeaseName != "" {
		if c.leases, err = kube.NewForConfig(rest.CopyConfig(cfg)); err != nil {
			return nil, err
		}
		c.tenure = &lease.Tenure{}
		cfg.Wrap(c.tenure.WrapTransport)
	}
	if c.kube, err = kube.NewForConfig(cfg); err != nil {
		return nil, err
	}
	c.ev = newEvents(c.kube, componentController, o.NodeName, o.Log)
	ns := o.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	c.fleet = &fleetState{kube: c.kube, namespace: ns, name: FleetStateName(keys.Prefix), resume: keys.Key(KeyResume),
		nodes: map[string]map[string]string{}, logf: func(what, node string, err error) { o.Log.Error(what, "node", node, "err", err) }}
	c.halted = map[string]bool{}
	return c, nil
}

// elect leads while it holds the Lease, and stops leading when it loses it.
func (c *controller) elect(ctx context.Context) error {
	var mu sync.Mutex
	var stop context.CancelFunc
	var done chan struct{}
	leases := beatingLeases{next: c.leases.CoordinationV1().Leases(c.o.Namespace), elector: c.probe.Loop("elector", c.o.HealthAllowance),
		decide: c.beat, leading: c.leading.Load}
	return lease.Run(ctx, lease.Config{
		Tenure: c.tenure,
		Client: leases, Name: c.o.LeaseName, Identity: c.o.Identity,
		Duration: c.o.LeaseDuration, RenewDeadline: c.o.LeaseDuration * 2 / 3, RetryPeriod: c.o.LeaseDuration / 5, Log: c.o.Log,
		OnStartedLeading: func() {
			mu.Lock()
			defer mu.Unlock()
			var lctx context.Context
			lctx, stop = context.WithCancel(ctx)
			done = make(chan struct{})
			go func() {
				defer close(done)
				if err := c.lead(lctx); err != nil && lctx.Err() == nil {
					c.o.Log.Error("controller stopped", "err", err)
				}
			}()
		},
		OnStoppedLeading: func() {
			mu.Lock()
			defer mu.Unlock()
			stop()
			<-done
		},
	})
}

// lead watches the Nodes and re-decides on every change and every Resync.
// Turns do not overlap: the changes seen during one make one next turn.
func (c *controller) lead(ctx context.Context) error {
	c.o.Log.Info("leading the node updates", "prefix", c.keys.Prefix, "maxConcurrent", c.o.Policy.MaxConcurrent)
	c.beat()
	c.leading.Store(true)
	defer func() { c.leading.Store(false); c.synced.Store(false); c.m.forgetLeaderView() }()
	if err := c.fleet.load(ctx); err != nil {
		return err
	}
	inf := nodeInformer(c.kube, "")
	pokeAll := func(any) { c.trigger(); signal(c.moved) }
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: pokeAll,
		UpdateFunc: func(_, o any) { pokeAll(o) }, DeleteFunc: pokeAll}); err != nil {
		return err
	}
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}
	c.store = inf.GetStore()
	c.synced.Store(true)
	defer func() { c.store = nil }()
	tick := time.NewTicker(c.o.Resync)
	defer tick.Stop()
	for {
		c.beat()
		if err := c.sync(ctx); err != nil && ctx.Err() == nil {
			c.o.Log.Error("sync", "err", err)
		}
		select {
		case <-ctx.Done():
			c.waitDrains()
			return nil
		case <-c.poke:
		case <-tick.C:
		}
	}
}

func (c *controller) trigger() { signal(c.poke) }

// signal sends on a channel of capacity 1 without waiting: a signal
// pending already stands for this one.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (c *controller) waitDrains() {
	for {
		c.mu.Lock()
		n := len(c.draining)
		c.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// nodeInformer watches the Nodes (only the one named, when name is set).
func nodeInformer(c *kube.Clientset, name string) cache.SharedIndexInformer {
	api := c.CoreV1().Nodes()
	tweak := func(o *metav1.ListOptions) {
		if name != "" {
			o.FieldSelector = "metadata.name=" + name
		}
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
	return cache.NewSharedIndexInformer(lw, &corev1.Node{}, 0, cache.Indexers{})
}
