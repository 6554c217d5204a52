package agent

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// startTrace holds the agent's first GET of its Node until its NodeUpdate's
// GET and a watch have begun (or hold has passed), and records which began
// while it was held.
type startTrace struct {
	node, object string // the paths of the Node's and the NodeUpdate's GET
	hold         time.Duration

	mu                    sync.Mutex
	held                  bool
	objectBegun, watching bool
	beside                chan struct{} // closed once both have begun
	objectDuring          bool          // the NodeUpdate's GET began while the Node's was held
	watchDuring           bool          // a watch began while the Node's GET was held
	nodeDone              chan struct{} // closed once the held GET returned
}

func (s *startTrace) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		watch := r.URL.Query().Get("watch") == "true"
		s.mu.Lock()
		first := r.Method == http.MethodGet && r.URL.Path == s.node && !watch && !s.held
		if first {
			s.held = true
		}
		during := s.held && !first && !isClosed(s.nodeDone)
		if r.URL.Path == s.object && !watch {
			s.objectBegun = true
			s.objectDuring = s.objectDuring || during
		}
		if watch {
			s.watching = true
			s.watchDuring = s.watchDuring || during
		}
		if s.objectBegun && s.watching && !isClosed(s.beside) {
			close(s.beside)
		}
		s.mu.Unlock()
		if first {
			select {
			case <-s.beside:
			case <-time.After(s.hold):
			}
			defer close(s.nodeDone)
		}
		return rt.RoundTrip(r)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestStartReadsSideBySide: once the API server is known supported, the
// agent's start reads its Node and its NodeUpdate side by side, and its
// informers list and watch beside those reads (and the publish they
// serve), rather than one request after the other: its first GET of its
// Node, held until the others begin (or 45 s), sees the NodeUpdate's
// GET and a watch begin meanwhile.
func TestStartReadsSideBySide(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	node := f.NS + "-n0"
	trace := &startTrace{node: "/api/v1/nodes/" + node, object: "/apis/ops.slipway.dev/v1/namespaces/" + f.NS + "/nodeupdates/" + node,
		hold: 45 * time.Second, beside: make(chan struct{}), nodeDone: make(chan struct{})}
	f.opts = func(o *Options) {
		cfg := rest.CopyConfig(o.Config)
		cfg.Wrap(trace.wrap)
		o.Config = cfg
	}
	f.Start(node)
	select {
	case <-trace.nodeDone:
	case <-time.After(trace.hold + 2*time.Minute):
		t.Fatal("the agent never read its Node")
	}
	trace.mu.Lock()
	defer trace.mu.Unlock()
	if !trace.objectDuring {
		t.Errorf("the agent read its NodeUpdate only after its Node (the reads one after the other)")
	}
	if !trace.watchDuring {
		t.Errorf("the agent's informers began only after its Node was read (the start one step after the other)")
	}
}
