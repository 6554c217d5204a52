package controller

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/kube"
)

// The drain's guard: no eviction without a slot the API server confirms
// at that moment. A drain runs for minutes; the slot can be taken away
// meanwhile (a stale slot recovered, a channel deleted or made invalid, a
// window deferral). The controller's drain client GETs the channel before
// each eviction and each pod deletion, and refuses (errSlotGone) once the
// slot is gone.

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
