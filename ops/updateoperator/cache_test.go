package updateoperator

import (
	"net/http"
	"reflect"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

func TestCaughtUp(t *testing.T) {
	for _, tc := range []struct {
		name string
		have map[string]string
		want map[string]int64
		ok   bool
		done []string
	}{
		{"nothing written", map[string]string{"a": "5"}, map[string]int64{}, true, nil},
		{"cache at the write", map[string]string{"a": "7"}, map[string]int64{"a": 7}, true, []string{"a"}},
		{"cache past the write", map[string]string{"a": "9"}, map[string]int64{"a": 7}, true, []string{"a"}},
		{"cache behind the write", map[string]string{"a": "6", "b": "9"}, map[string]int64{"a": 7, "b": 8}, false, []string{"b"}},
		{"node deleted since the write", map[string]string{}, map[string]int64{"a": 7}, true, []string{"a"}},
		{"a write whose version is unknown: never caught up", map[string]string{"a": "99"}, map[string]int64{"a": -1}, false, nil},
		{"a cached version that is not a number: not caught up", map[string]string{"a": "x"}, map[string]int64{"a": 3}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, done := CaughtUp(tc.have, tc.want)
			sort.Strings(done)
			if ok != tc.ok || !reflect.DeepEqual(done, tc.done) {
				t.Errorf("CaughtUp = %v, %v; want %v, %v", ok, done, tc.ok, tc.done)
			}
		})
	}
}

// nodeReads counts the controller's reads of Nodes over the wire: LISTs
// (watches apart) and GETs of one Node.
type nodeReads struct{ lists, gets atomic.Int64 }

func (r *nodeReads) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method == http.MethodGet && req.URL.Query().Get("watch") != "true" {
			switch {
			case req.URL.Path == "/api/v1/nodes":
				r.lists.Add(1)
			case len(req.URL.Path) > len("/api/v1/nodes/"):
				if req.URL.Path[:len("/api/v1/nodes/")] == "/api/v1/nodes/" {
					r.gets.Add(1)
				}
			}
		}
		return rt.RoundTrip(req)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The controller decides from its informer's cache: a whole rollout costs
// a few LISTs of the Nodes (the informer's own, and one when the cache
// lags the controller's own writes for longer than a moment), not one per
// node event, and a handful of GETs per node.
func TestControllerReadsNodesFromItsCache(t *testing.T) {
	f := newFleet(t, "cached", 4)
	var reads nodeReads
	stop := f.controller(func(o *ControllerOptions) {
		o.Policy.MaxConcurrent = 2
		cfg := rest.CopyConfig(o.Config)
		cfg.Wrap(reads.wrap)
		o.Config = cfg
	})
	defer stop()
	eventually(t, 2*time.Minute, "every node at v2", f.done)
	lists, gets := reads.lists.Load(), reads.gets.Load()
	t.Logf("a rollout of %d nodes: %d LISTs of the Nodes, %d GETs of a Node (%.1f per node)", len(f.nodes), lists, gets, float64(gets)/float64(len(f.nodes)))
	if lists > 4 {
		t.Errorf("%d LISTs of every Node for a rollout of %d nodes; want the cache read (at most 4: the informer's, and a few when it lagged)", lists, len(f.nodes))
	}
	if per := float64(gets) / float64(len(f.nodes)); per > 8 {
		t.Errorf("%.1f GETs per node; want at most 8", per)
	}
}
