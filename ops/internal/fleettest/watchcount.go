package fleettest

import (
	"io"
	"maps"
	"net/http"
	"strings"
	"sync"
)

// WatchCounter counts the watches of Nodes, NodeUpdates, Jobs and pods a
// client holds open, from its own requests (Wrap its rest.Config): a watch
// is open from its request until its response body is closed.
type WatchCounter struct {
	mu   sync.Mutex
	open map[string]int // by resource
	most map[string]int // the most open at once since ResetMax
}

// NewWatchCounter is a counter with nothing open.
func NewWatchCounter() *WatchCounter {
	return &WatchCounter{open: map[string]int{}, most: map[string]int{}}
}

// Wrap counts the watches sent through rt (for rest.Config.Wrap).
func (w *WatchCounter) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		res := watchedResource(r)
		resp, err := rt.RoundTrip(r)
		if res == "" || err != nil {
			return resp, err
		}
		w.add(res, 1)
		resp.Body = &closeCounted{ReadCloser: resp.Body, closed: func() { w.add(res, -1) }}
		return resp, nil
	})
}

// Counts are the watches open now and the most open at once, by resource.
func (w *WatchCounter) Counts() (open, most map[string]int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.open), maps.Clone(w.most)
}

// ResetMax forgets the most-at-once counts so far.
func (w *WatchCounter) ResetMax() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.most = map[string]int{}
}

func (w *WatchCounter) add(res string, d int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.open[res] += d
	w.most[res] = max(w.most[res], w.open[res])
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

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// closeCounted calls closed once when the body is closed.
type closeCounted struct {
	io.ReadCloser
	once   sync.Once
	closed func()
}

func (c *closeCounted) Close() error {
	c.once.Do(c.closed)
	return c.ReadCloser.Close()
}
