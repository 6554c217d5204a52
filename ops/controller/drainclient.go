package controller

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

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

// disruptionTimeout bounds an eviction or pod deletion once sent.
const disruptionTimeout = 30 * time.Second

// guardTransport confirms the slot of each disruptive request, then sends
// it to its end even when the controller stops meanwhile (it read-holds
// inFlight, which the stopping controller locks): an eviction cut off by the client
// may leave the API server having counted it against the pod's
// PodDisruptionBudget without deleting the pod, and the budget then
// refuses every other eviction until the disruption controller gives up
// on it (two minutes).
type guardTransport struct {
	next     http.RoundTripper
	inFlight *sync.RWMutex // read-held while one is sent
}

func (t *guardTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if !disruptive(r) {
		return t.next.RoundTrip(r)
	}
	confirm, _ := r.Context().Value(confirmKey{}).(func(context.Context) error)
	if confirm == nil {
		return nil, fmt.Errorf("%s %s: no slot to confirm it for: %w", r.Method, r.URL.Path, errSlotGone)
	}
	if err := confirm(r.Context()); err != nil {
		return nil, fmt.Errorf("evict %s: %w", r.URL.Path, err)
	}
	t.inFlight.RLock()
	defer t.inFlight.RUnlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), disruptionTimeout)
	resp, err := t.next.RoundTrip(r.WithContext(ctx))
	if err != nil || resp.Body == nil {
		cancel()
		return resp, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelOnClose ends a request's context when its response body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// drainClient is the client the controller's drains evict through (cfg
// fenced by its Lease's tenure): every eviction and pod deletion confirms
// its slot with the API server first (withConfirm), and one sent without
// a slot to confirm is not sent; inFlight is read-held while one is sent.
func drainClient(cfg *rest.Config, inFlight *sync.RWMutex) (*kube.Clientset, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &guardTransport{next: rt, inFlight: inFlight} })
	return kube.NewForConfig(cfg)
}
