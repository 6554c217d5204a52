package faults

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Source serves a release mirror directory (<dir>/latest,
// <dir>/<version>/<artifact>) as an http channel, as a release server
// would: <URL> is .../releases/latest (a version token), artifacts are
// at .../releases/download/<version>/<artifact>. Its faults: every answer
// delayed (SetDelay), every answer 503 (SetFail), artifacts served with a
// byte changed while their checksum list stays intact (SetCorrupt).
type Source struct {
	dir string
	url string
	srv *http.Server

	mu      sync.Mutex
	delay   time.Duration
	fail    bool
	corrupt bool

	// Requests, Failed and Corrupted count the answers.
	Requests, Failed, Corrupted atomic.Int64
}

// NewSource serves dir on a free port of 127.0.0.1.
func NewSource(dir string) (*Source, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("release source: %w", err)
	}
	s := &Source{dir: dir, url: "http://" + ln.Addr().String() + "/releases/latest"}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// URL is the channel URL (…/releases/latest).
func (s *Source) URL() string { return s.url }

// Close stops serving.
func (s *Source) Close() error { return s.srv.Close() }

// SetDelay delays every answer by d (0: none).
func (s *Source) SetDelay(d time.Duration) { s.mu.Lock(); s.delay = d; s.mu.Unlock() }

// SetFail makes every answer a 503.
func (s *Source) SetFail(on bool) { s.mu.Lock(); s.fail = on; s.mu.Unlock() }

// SetCorrupt makes every artifact but the checksum lists served with a
// byte changed.
func (s *Source) SetCorrupt(on bool) { s.mu.Lock(); s.corrupt = on; s.mu.Unlock() }

func (s *Source) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.Requests.Add(1)
	s.mu.Lock()
	delay, fail, corrupt := s.delay, s.fail, s.corrupt
	s.mu.Unlock()
	if delay > 0 {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(delay):
		}
	}
	if fail {
		s.Failed.Add(1)
		http.Error(w, "release source failing (fault injected)", http.StatusServiceUnavailable)
		return
	}
	var rel string
	switch {
	case r.URL.Path == "/releases/latest":
		rel = "latest"
	case strings.HasPrefix(r.URL.Path, "/releases/download/"):
		rel = strings.TrimPrefix(r.URL.Path, "/releases/download/")
	default:
		http.NotFound(w, r)
		return
	}
	if strings.Contains(rel, "..") {
		http.NotFound(w, r)
		return
	}
	b, err := os.ReadFile(filepath.Join(s.dir, filepath.FromSlash(rel)))
	if err != nil {
		http.NotFound(w, r)
		return
	}
	if name := filepath.Base(rel); corrupt && rel != "latest" && !strings.HasPrefix(name, "sha256sum") && len(b) > 0 {
		b = append([]byte(nil), b...)
		b[len(b)/2] ^= 0xff
		s.Corrupted.Add(1)
	}
	w.Header().Set("Content-Length", fmt.Sprint(len(b)))
	_, _ = w.Write(b)
}
