package updateoperator

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/health"
	"slipway.dev/slipway/ops/lease"
)

// The controller's and the agent's /healthz and /readyz (ops/health).
// Healthy: each of the component's loops beat within its allowance; a
// loop wedged in a call that never returns turns /healthz red and the
// kubelet restarts the container. The controller's loops are the elector
// (it beats on each read or write of the Lease, every retry period, leader
// or not) and the decide loop (it beats on each turn while leading; while
// another replica leads, the elector's beats are its too: it waits, it is
// not stuck). The agent's loop beats on each reconcile. Ready: the Node
// informer synced (for a controller that is not the leader: at once).

// DefaultHealthAddr is where both components serve their probes.
const DefaultHealthAddr = ":9481"

// controllerAllowance is how long the decide loop and the elector may go
// without a beat: a turn waits at most cacheWait for the cache and then
// sends its writes and reads, each bounded by the API server's own request
// timeout (60 s by default).
func controllerAllowance(resync time.Duration) time.Duration {
	return 2*resync + 2*time.Minute
}

// agentAllowance is how long the agent's loop may go without a beat: one
// reconcile runs at most one host call under its own deadline (bounded).
func agentAllowance(o AgentOptions) time.Duration {
	return max(o.StepTimeout, o.CheckTimeout) + 2*o.Resync + time.Minute
}

// serveProbes serves p's /healthz and /readyz on addr until ctx ends ("" = off).
func serveProbes(ctx context.Context, addr string, p *health.Probe, log *slog.Logger) error {
	mux := http.NewServeMux()
	p.Install(mux)
	return health.ListenAndServe(ctx, addr, mux, log)
}

// beatingLeases is the elector's Lease client: each call beats the elector
// loop, and the decide loop too while this replica does not lead.
type beatingLeases struct {
	next            lease.Client
	elector, decide func()
	leading         func() bool
}

func (b beatingLeases) beat() {
	b.elector()
	if !b.leading() {
		b.decide()
	}
}

func (b beatingLeases) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	b.beat()
	return b.next.Get(ctx, name, opts)
}

func (b beatingLeases) Create(ctx context.Context, l *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	b.beat()
	return b.next.Create(ctx, l, opts)
}

func (b beatingLeases) Update(ctx context.Context, l *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	b.beat()
	return b.next.Update(ctx, l, opts)
}
