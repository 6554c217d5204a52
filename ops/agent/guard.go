package agent

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/upgrade/reboot"
)

// The slot guard: no eviction and no reboot without a slot the API server
// confirms at that moment. A drain runs for minutes and the reboot waits
// rebootDelay; the slot can be taken away meanwhile (a stale slot
// recovered, a channel deleted or made invalid, a window deferral). The
// controller's drain client GETs the channel before each eviction and each
// pod deletion, the node's Rebooter its Node (its channel views) before
// the reboot, and they refuse (errSlotGone) once the slot is gone.

// slotGuard holds the slot the node's reboot under way acts for.
type slotGuard struct {
	a    *Agent
	mu   sync.Mutex
	ch   *v1.UpdateChannel
	slot v1.Slot
}

// hold sets the slot the reboot needs (nil ch: none).
func (g *slotGuard) hold(ch *v1.UpdateChannel, slot v1.Slot) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ch, g.slot = ch, slot
}

// confirm asks the API server whether the slot held is still this node's.
func (g *slotGuard) confirm(ctx context.Context, what string) error {
	g.mu.Lock()
	ch, slot := g.ch, g.slot
	g.mu.Unlock()
	if ch == nil {
		return fmt.Errorf("%s: node %s holds no slot: %w", what, g.a.opts.NodeName, errSlotGone)
	}
	if err := g.a.confirmSlot(ctx, ch, slot); err != nil {
		return fmt.Errorf("%s for channel %s: %w", what, ch.Name, err)
	}
	return nil
}

// disruptive tells the requests a drain's client confirms: an eviction, a pod deletion.
func disruptive(r *http.Request) bool {
	p := r.URL.Path
	return r.Method == http.MethodPost && strings.HasSuffix(p, "/eviction") ||
		r.Method == http.MethodDelete && strings.Contains(p, "/pods/")
}

// confirmKey carries, in a request's context, how the controller's drain
// client confirms the slot a drain acts for (withConfirm).
type confirmKey struct{}

// withConfirm makes the evictions and pod deletions sent with ctx confirm
// their slot with confirm first.
func withConfirm(ctx context.Context, confirm func(context.Context) error) context.Context {
	return context.WithValue(ctx, confirmKey{}, confirm)
}

type guardTransport struct{ next http.RoundTripper }

func (t *guardTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if disruptive(r) {
		confirm, _ := r.Context().Value(confirmKey{}).(func(context.Context) error)
		if confirm == nil {
			return nil, fmt.Errorf("%s %s: no slot to confirm it for: %w", r.Method, r.URL.Path, errSlotGone)
		}
		if err := confirm(r.Context()); err != nil {
			return nil, fmt.Errorf("evict %s: %w", r.URL.Path, err)
		}
	}
	return t.next.RoundTrip(r)
}

// drainClient is the client the controller's drains evict through (cfg
// fenced by its Lease's tenure): every eviction and pod deletion confirms
// its slot with the API server first (withConfirm), and one sent without
// a slot to confirm is not sent.
func drainClient(cfg *rest.Config) (*kube.Clientset, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &guardTransport{next: rt} })
	return kube.NewForConfig(cfg)
}

// guardedRebooter confirms the slot right before it reboots.
type guardedRebooter struct {
	g    *slotGuard
	next reboot.Rebooter
}

func (r *guardedRebooter) Reboot(ctx context.Context) error {
	if err := r.g.confirm(ctx, "reboot"); err != nil {
		return fmt.Errorf("not rebooting: %w", err)
	}
	return r.next.Reboot(ctx)
}

func (r *guardedRebooter) String() string { return r.next.String() }

// jobRefused records, when the API server refused a Job this agent built
// (its admission policy: a channel's image, token Secret or mirror the
// manifest does not allow), a Warning Event on the channel saying why; the
// sync is retried with backoff, as for any failed write.
func (a *Agent) jobRefused(ch *v1.UpdateChannel, job string, err error) {
	if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
		a.recorder.Eventf(ch, corev1.EventTypeWarning, "JobRefused",
			"node %s: the API server refused job %s (see docs/security.md: a channel's image, token Secret and mirror must be ones the manifest allows): %v", a.opts.NodeName, job, err)
	}
}
