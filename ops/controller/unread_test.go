package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/internal/fleettest"
)

func TestUnanswered(t *testing.T) {
	nodes := schema.GroupResource{Resource: "nodes"}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"no error", nil, false},
		{"a handler timeout (504)", apierrors.NewTimeoutError("request did not complete within the allotted timeout", 0), true},
		{"etcd timed out (500 with reason Timeout)", apierrors.NewServerTimeout(nodes, "get", 1), true},
		{"too many requests (429)", apierrors.NewTooManyRequests("busy", 1), true},
		{"a request timeout (408)", apierrors.NewGenericServerResponse(408, "get", nodes, "n", "", 0, false), true},
		{"service unavailable (503)", apierrors.NewServiceUnavailable("starting"), true},
		{"an internal error (500)", apierrors.NewInternalError(errors.New("etcd")), true},
		{"wrapped with context", fmt.Errorf("read node n before its drain: %w", apierrors.NewTooManyRequests("busy", 1)), true},
		{"connection refused", &url.Error{Op: "Get", URL: "https://api/nodes/n", Err: syscall.ECONNREFUSED}, true},
		{"the client's own timeout", fmt.Errorf("read: %w", context.DeadlineExceeded), true},
		{"the answer cut short", io.ErrUnexpectedEOF, true},
		{"forbidden: an answer", apierrors.NewForbidden(nodes, "n", errors.New("RBAC")), false},
		{"the node gone: an answer", apierrors.NewNotFound(nodes, "n"), false},
		{"the slot gone", errSlotGone, false},
		{"this process stopping", fmt.Errorf("read: %w", context.Canceled), false},
		{"not an answer of the API server", errors.New("decode: bad json"), false},
	} {
		if got := unanswered(c.err); got != c.want {
			t.Errorf("%s: unanswered(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// timeoutGets wraps cfg's transport: while fail is above zero, a GET of
// the object at a path ending in suffix is answered as a loaded API
// server's handler timeout answers it (504, reason Timeout), and fail
// counts down.
func timeoutGets(cfg *rest.Config, suffix string, fail *atomic.Int32) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, suffix) && fail.Add(-1) >= 0 {
				body := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Timeout: request did not complete within the allotted timeout","reason":"Timeout","code":504}`
				return &http.Response{StatusCode: http.StatusGatewayTimeout, Header: http.Header{"Content-Type": {"application/json"}},
					Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
			}
			return rt.RoundTrip(req)
		})
	})
	return cfg
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestDrainWithoutAnAnswerWaits: the API server times out the
// controller's read of the channel that confirms a slot before its drain
// (as a loaded control plane does, 504): nothing was written, so the
// drain waits and asks again, the slot kept. No UpgradeFailed, no failure
// recorded, and all three roll.
func TestDrainWithoutAnAnswerWaits(t *testing.T) {
	t.Parallel()
	var fail atomic.Int32
	f, first, _, releaseFirst := grantedOneWith(t, false, func(o *Options) {
		if o.Config != nil { // nil: the options the agents take their settings from
			o.Config = timeoutGets(o.Config, "/updatechannels/default", &fail)
		}
	})
	fail.Store(1) // the drain's confirmation of the slot is the next GET of the channel
	releaseFirst(true)
	f.WaitFor("all three at v2", 2*time.Minute, fleettest.Done(3))
	f.AssertAllAt("v2")
	if fail.Load() >= 0 {
		t.Fatal("no read of the channel was answered with a timeout: the test tests nothing")
	}
	if n := f.EventsWithin("UpgradeFailed", 1, time.Second); n > 0 {
		t.Errorf("%d UpgradeFailed Events: a read without an answer failed %s's upgrade", n, first)
	}
	if ch := f.Get(); len(ch.Status.Failed) > 0 {
		t.Errorf("failures recorded: %+v", ch.Status.Failed)
	}
}
