// Package process is what the node agent (ops/agent) and the controller
// (ops/controller) each do as a process around their own work: wait for a
// supported API server and install the CRDs when asked, build their
// informers, serve /metrics beside /healthz and /readyz, and pulse their
// workers' loop. It holds no part of their protocol (ops/protocol) and no
// decision (ops/plan).
package process

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"slipway.dev/slipway/ops/health"
)

// ListWatcher is a typed client's List and Watch.
type ListWatcher[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// NewInformer is a shared informer of objects like example, listed and
// watched through api with the options tweak sets and indexed by
// namespace, as client-go's informer factories build them.
func NewInformer[L runtime.Object](api ListWatcher[L], example runtime.Object, resync time.Duration, tweak func(*metav1.ListOptions)) cache.SharedIndexInformer {
	return NewInformerWatching(api, example, resync, 0, tweak)
}

// AgentWatch is how long a node agent's watches last before they are made
// again: 30 to 60 minutes, where client-go's informers take 5 to 10. A
// watch that ends is a new request and, at thousands of nodes with four
// watches each, most of the agents' reads at rest; bookmarks keep a long
// watch's resource version fresh all the same. The cost: after an API
// server is added behind a load balancer, the agents move to it within
// the hour.
const AgentWatch = 30 * time.Minute

// NewInformerWatching is NewInformer whose watches last watchFor to twice
// that (0: client-go's 5 to 10 minutes), each at random.
func NewInformerWatching[L runtime.Object](api ListWatcher[L], example runtime.Object, resync, watchFor time.Duration, tweak func(*metav1.ListOptions)) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			tweak(&o)
			return api.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			tweak(&o)
			o.TimeoutSeconds = watchTimeout(o.TimeoutSeconds, watchFor, rand.Float64())
			return api.Watch(ctx, o)
		},
	}
	return cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, api), example, resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

// watchTimeout is the timeout a watch asks for: the reflector's (asked)
// when watchFor is 0, else watchFor stretched by 1+r (r in [0, 1)).
func watchTimeout(asked *int64, watchFor time.Duration, r float64) *int64 {
	if watchFor <= 0 {
		return asked
	}
	s := int64(watchFor.Seconds() * (1 + r))
	return &s
}

// ServeMetrics serves registry at /metrics and probe's /healthz and
// /readyz on addr until ctx ends.
func ServeMetrics(ctx context.Context, addr string, registry *prometheus.Registry, probe *health.Probe, log *slog.Logger) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	probe.Install(mux)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("metrics server stopped", "addr", addr, "err", err)
	}
}

// ServeProfiles serves the Go runtime's profiles (net/http/pprof) at
// /debug/pprof/ on addr ("" = off) until ctx ends: a CPU profile of the
// process under load is /debug/pprof/profile?seconds=N. Off unless asked
// for: a profile costs the process CPU while it runs, and the endpoint
// shows its internals. An address that cannot be listened on is an error
// at once (health.ListenAndServe).
func ServeProfiles(ctx context.Context, addr string, log *slog.Logger) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return health.ListenAndServe(ctx, addr, mux, log)
}

// /healthz and /readyz (ops/health), served beside /metrics, for the
// agent and the controller alike. Healthy: the workers take a pulse from
// the queue at least every loop allowance (a pulse is queued every
// PulseEvery, so an idle worker beats too, and a worker wedged in a sync
// that never returns, while the others are busy or wedged as well, does
// not). Ready: the informers synced.

// PulseEvery is how often a pulse is queued for the workers: every 10 s,
// or a quarter of the allowance when that is shorter.
func PulseEvery(allowance time.Duration) time.Duration { return min(10*time.Second, allowance/4) }

// Pulse registers the workers' loop on probe and calls queue (which queues
// a pulse for the workers) every PulseEvery(allowance) until ctx ends. A
// worker that takes the pulse calls the beat returned.
func Pulse(ctx context.Context, probe *health.Probe, allowance time.Duration, queue func()) (beat func()) {
	beat = probe.Loop("workers", allowance)
	go func() {
		t := time.NewTicker(PulseEvery(allowance))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				queue()
			}
		}
	}()
	return beat
}

// WaitSynced waits until every informer in infs has filled its cache, or
// ctx ends (false). It wakes on the sync itself, where client-go's
// WaitForCacheSync looks every 100 ms: a node agent waits for its caches
// at every start, after every reboot, and the node's slot is held until
// it has, so a poll's wait would be paid by every slot of a rollout.
func WaitSynced(ctx context.Context, infs ...cache.SharedIndexInformer) bool {
	checkers := make([]cache.DoneChecker, len(infs))
	for i, inf := range infs {
		checkers[i] = inf.HasSyncedChecker()
	}
	return cache.WaitFor(ctx, "", checkers...)
}

// ReadyWhen makes probe's readiness wait for informers to sync.
func ReadyWhen(probe *health.Probe, infs ...cache.SharedIndexInformer) {
	for _, inf := range infs {
		probe.ReadyWhen("informers synced", inf.HasSynced)
	}
}

// NodeReady reads a Node's Ready condition: whether it is True and since
// when it is what it is.
func NodeReady(n *corev1.Node) (bool, time.Time) {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue, c.LastTransitionTime.Time
		}
	}
	return false, n.CreationTimestamp.Time
}

// Work takes keys from queue until it shuts down: sync does one and says
// when it wants to run again (0: not unless asked); a sync that failed
// (while ctx goes on) is told to failed and retried with the queue's
// backoff. A key never runs twice at once.
func Work[K comparable](ctx context.Context, queue workqueue.TypedRateLimitingInterface[K], sync func(context.Context, K) (time.Duration, error), failed func(K, error)) {
	for {
		k, quit := queue.Get()
		if quit {
			return
		}
		after, err := sync(ctx, k)
		switch {
		case err != nil && ctx.Err() == nil:
			failed(k, err)
			queue.AddRateLimited(k)
		default:
			queue.Forget(k)
			if after > 0 {
				queue.AddAfter(k, after)
			}
		}
		queue.Done(k)
	}
}

// Timings sets the durations both programs take to their defaults where
// they are zero or less: the resync (30s), the Lease's duration (15s), the
// agents' heartbeat interval (1m) and the workers' loop allowance (2m).
func Timings(resync, lease, heartbeat, loop *time.Duration) {
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{resync, 30 * time.Second}, {lease, 15 * time.Second}, {heartbeat, time.Minute}, {loop, 2 * time.Minute}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
}

// ClientConfig is a copy of cfg with userAgent unless cfg names one: it
// names the writer in the API server's audit log.
func ClientConfig(cfg *rest.Config, userAgent string) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = userAgent
	}
	return cfg
}
