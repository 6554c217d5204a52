package agent

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/internal/fleettest"
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

// busyStart answers the agent's first reads of the API server's version
// and of its NodeUpdate as a busy API server does (429, no Retry-After:
// client-go does not ask again by itself), and counts the Node informer's
// lists (a list, or a watch that sends its initial events).
type busyStart struct {
	object string // the NodeUpdate's path

	mu                   sync.Mutex
	version, objectReads int // 429s still to answer
	nodeLists            int
}

func (b *busyStart) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		q := r.URL.Query()
		watch := q.Get("watch") == "true"
		b.mu.Lock()
		if r.URL.Path == "/api/v1/nodes" && (!watch || q.Get("sendInitialEvents") == "true") {
			b.nodeLists++
		}
		busy := false
		switch {
		case r.URL.Path == "/version" && b.version > 0:
			b.version--
			busy = true
		case r.URL.Path == b.object && !watch && b.objectReads > 0:
			b.objectReads--
			busy = true
		}
		b.mu.Unlock()
		if busy {
			return fleettest.BusyAnswer(r), nil
		}
		return rt.RoundTrip(r)
	})
}

// TestBusyServerAtStartIsAskedAgain: an API server too busy to answer the
// agent's first reads at start (its version twice, its NodeUpdate three
// times, 429) is asked again by the same process: the agent starts and
// reports without ending (an ended agent is restarted by the kubelet and
// lists everything again), its Node listed once.
func TestBusyServerAtStartIsAskedAgain(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	node := f.NS + "-n0"
	busy := &busyStart{object: "/apis/ops.slipway.dev/v1/namespaces/" + f.NS + "/nodeupdates/" + node, version: 2, objectReads: 3}
	f.opts = func(o *Options) {
		cfg := rest.CopyConfig(o.Config)
		cfg.Wrap(busy.wrap)
		o.Config = cfg
	}
	f.Start(node) // an agent that ends fails the test (fleettest)
	f.AgentsUp(node)
	busy.mu.Lock()
	defer busy.mu.Unlock()
	if busy.version > 0 || busy.objectReads > 0 {
		t.Fatalf("the start did not meet the busy answers (%d version, %d NodeUpdate left): the test tests nothing", busy.version, busy.objectReads)
	}
	if busy.nodeLists != 1 {
		t.Errorf("the agent listed its Node %d times, want once", busy.nodeLists)
	}
}
