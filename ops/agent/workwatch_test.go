package agent

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/fleettest"
)

func TestNextWorkWatch(t *testing.T) {
	idle := WorkWatchState{Open: true, Synced: true, NodeSettled: true, Idle: time.Minute, Linger: time.Minute}
	for _, c := range []struct {
		name string
		edit func(*WorkWatchState)
		want WorkWatchStep
	}{
		{"closed already", func(s *WorkWatchState) { s.Open = false }, WorkWatchNone},
		{"no work, no Job, the linger over", func(*WorkWatchState) {}, WorkWatchClose},
		{"the caches not filled yet: they tell nothing of the Jobs", func(s *WorkWatchState) { s.Synced = false }, WorkWatchKeep},
		{"a sync holds them", func(s *WorkWatchState) { s.Users = 1 }, WorkWatchKeep},
		{"the node has work", func(s *WorkWatchState) { s.Needed = true }, WorkWatchKeep},
		{"a Job of the node runs", func(s *WorkWatchState) { s.JobsRunning = true }, WorkWatchKeep},
		{"the Node asks something of a reader without the hold (a cordon of slipway's, versions to publish)", func(s *WorkWatchState) { s.NodeSettled = false }, WorkWatchKeep},
		{"a sync held them since the Jobs were read", func(s *WorkWatchState) { s.HeldMeanwhile = true }, WorkWatchKeep},
		{"within the linger", func(s *WorkWatchState) { s.Idle = time.Minute - time.Second }, WorkWatchKeep},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := idle
			c.edit(&s)
			if got := nextWorkWatch(s); got != c.want {
				t.Errorf("nextWorkWatch(%+v) = %v, want %v", s, got, c.want)
			}
		})
	}
}

// watchCounter counts the watches of Nodes, NodeUpdates, Jobs and pods a client holds open,
// from its own requests: a watch is open from its request until its
// response body is closed.
type watchCounter struct {
	mu   sync.Mutex
	open map[string]int // by resource
	max  map[string]int // the most open at once since reset
}

func (w *watchCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		res := watchedResource(r)
		resp, err := rt.RoundTrip(r)
		if res == "" || err != nil {
			return resp, err
		}
		w.add(res, 1)
		resp.Body = &countedBody{ReadCloser: resp.Body, done: func() { w.add(res, -1) }}
		return resp, nil
	})
}

// watchedResource is "nodes", "nodeupdates", "jobs" or "pods" for a watch
// of one, else "".
func watchedResource(r *http.Request) string {
	if r.URL.Query().Get("watch") != "true" && r.URL.Query().Get("watch") != "1" {
		return ""
	}
	for _, res := range []string{"nodes", "nodeupdates", "jobs", "pods"} {
		if strings.HasSuffix(r.URL.Path, "/"+res) {
			return res
		}
	}
	return ""
}

func (w *watchCounter) add(res string, d int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.open[res] += d
	w.max[res] = max(w.max[res], w.open[res])
}

func (w *watchCounter) counts() (open, most map[string]int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	open, most = map[string]int{}, map[string]int{}
	for k, v := range w.open {
		open[k] = v
	}
	for k, v := range w.max {
		most[k] = v
	}
	return open, most
}

func (w *watchCounter) resetMax() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.max = map[string]int{}
}

type countedBody struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *countedBody) Close() error {
	b.once.Do(b.done)
	return b.ReadCloser.Close()
}

// TestIdleAgentClosesItsWorkWatches: an agent whose node has no work
// closes its watches of its Node, the node's Jobs and their pods after the
// linger, and keeps its NodeUpdate's; a channel that moves its node opens
// them again (the NodeUpdate's event), and the node upgrades; once it is
// done they close again. The agent's own requests are counted, as its
// client sends them.
func TestIdleAgentClosesItsWorkWatches(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var procs []*watchCounter // one per agent process: the reboot starts another
	f := newFleet(t, 1, func(o *Options) {
		o.WorkWatchLinger = 2 * time.Second
		if o.Config != nil {
			w := &watchCounter{open: map[string]int{}, max: map[string]int{}}
			mu.Lock()
			procs = append(procs, w)
			mu.Unlock()
			o.Config = rest.CopyConfig(o.Config)
			o.Config.Wrap(w.wrap)
		}
	})
	proc := func(i int) *watchCounter { // i < 0: the latest
		mu.Lock()
		defer mu.Unlock()
		if i < 0 {
			i = len(procs) - 1
		}
		return procs[i]
	}
	node := f.NS + "-n0"
	f.Start(node)
	f.AgentsUp(node)
	closed := func() bool {
		open, _ := proc(-1).counts()
		return open["nodes"] == 0 && open["jobs"] == 0 && open["pods"] == 0 && open["nodeupdates"] == 1
	}
	waitUntil(t, 30*time.Second, "the idle agent's Node, Job and pod watches closed, its NodeUpdate's open", closed)
	idle := proc(-1)
	idle.resetMax()
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(),
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS}}})
	f.WaitFor("at v2", 2*time.Minute, fleettest.Done(1))
	// The process that had closed them opened them again for the slot,
	// before its reboot started the next (which opens them at start).
	if _, most := idle.counts(); most["nodes"] == 0 || most["jobs"] == 0 || most["pods"] == 0 {
		t.Errorf("the node upgraded, but the idle agent never watched its Node, Jobs and pods again (most open at once: %v)", most)
	}
	waitUntil(t, 30*time.Second, "the Node, Job and pod watches closed again after the rollout", closed)
}
