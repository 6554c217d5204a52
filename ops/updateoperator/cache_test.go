package updateoperator

import (
	"fmt"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/testenv"
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

// apiCalls counts requests over the wire by what they are: "list nodes"
// (watches apart), "get node", "patch node", "create event", other.
type apiCalls struct {
	mu sync.Mutex
	n  map[string]int
}

func (a *apiCalls) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.URL.Query().Get("watch") != "true" {
			a.mu.Lock()
			if a.n == nil {
				a.n = map[string]int{}
			}
			a.n[callKind(req.Method, req.URL.Path)]++
			a.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

func callKind(method, path string) string {
	switch {
	case path == "/api/v1/nodes" && method == http.MethodGet:
		return "list nodes"
	case strings.HasPrefix(path, "/api/v1/nodes/") && method == http.MethodGet:
		return "get node"
	case strings.HasPrefix(path, "/api/v1/nodes/") && method == http.MethodPatch:
		return "patch node"
	case strings.HasSuffix(path, "/events") && method == http.MethodPost:
		return "create event"
	}
	return method + " " + path
}

func (a *apiCalls) get(kind string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n[kind]
}

func (a *apiCalls) String() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return fmt.Sprint(a.n)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The controller decides from its informer's cache: a whole rollout costs
// a few LISTs of the Nodes (the informer's own, and one when the cache
// lags the controller's own writes for longer than a moment), not one per
// node event. Its cordon and uncordon decide from the Node the turn read
// (no GET), and one node's update costs it five Node patches (prepare,
// perform, cordon, reboot, uncordon-and-finish) and four Events, after the
// first stabilize every new node is given (a patch and an Event). Each
// agent reads its Node with a GET only when its process starts (at start
// and after the reboot); otherwise from its cache, once that holds its
// own last write.
func TestControllerReadsNodesFromItsCache(t *testing.T) {
	f := newFleetOn(t, testenv.Need(t, env), "cached")
	var ctl, agents apiCalls
	f.agentWrap = agents.wrap
	for i := range 4 {
		f.addNode(fmt.Sprintf("cached-%d", i), i%2 == 1)
	}
	stop := f.controller(func(o *ControllerOptions) {
		o.Policy.MaxConcurrent = 2
		cfg := rest.CopyConfig(o.Config)
		cfg.Wrap(ctl.wrap)
		o.Config = cfg
	})
	defer stop()
	eventually(t, 2*time.Minute, "every node at v2", f.done)
	nodes := len(f.nodes)
	per := func(k int) float64 { return float64(k) / float64(nodes) }
	t.Logf("a rollout of %d nodes: controller %s; agents %s", nodes, ctl.String(), agents.String())
	for _, n := range f.nodes {
		t.Logf("Events about %s: %v", n, f.eventReasons(n))
	}
	if lists := ctl.get("list nodes"); lists > 4 {
		t.Errorf("%d LISTs of every Node for a rollout of %d nodes; want the cache read (at most 4: the informer's, and a few when it lagged)", lists, nodes)
	}
	// A conflict (someone wrote the Node since the turn read it) re-reads: one per node at most.
	if g := ctl.get("get node"); per(g) > 1 {
		t.Errorf("controller: %.1f GETs of a Node per node; want at most 1 (the cordon and uncordon decide from the turn's Node)", per(g))
	}
	// The cluster's other nodes (the package's own) get their first stabilize too: a patch and an Event each;
	// a patch refused for a conflict is followed by a GET and sent again.
	others := len(env.Nodes)
	if p := ctl.get("patch node") - others - ctl.get("get node"); per(p) > 6 {
		t.Errorf("controller: %.1f Node patches per node; want at most 6 (a first stabilize, then five per update)", per(p))
	}
	if e := ctl.get("create event") - others; per(e) > 5 {
		t.Errorf("controller: %.1f Events per node; want at most 5 (the uncordon that finishes says both in one)", per(e))
	}
	// Each agent process starts twice (at first, after its reboot): one GET each, and one spare for the whole fleet.
	if g := agents.get("get node"); g > 2*nodes+1 {
		t.Errorf("agents: %d GETs of their Node for %d nodes; want at most %d (one per process start)", g, nodes, 2*nodes+1)
	}
}
