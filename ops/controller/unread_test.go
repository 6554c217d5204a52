package controller

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/internal/fleettest"
)

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
