package e2e

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// slowMirror serves a mirror directory as an http channel
// (<url>/latest, artifacts at <url>/download/<version>/<name>) and throttles
// the rootfs artifact so that each download of it takes about perDownload:
// a slow mirror, the one cost that staging ahead hides.
type slowMirror struct {
	dir         string
	perDownload time.Duration
	srv         *http.Server
	url         string
	rootfsReads atomic.Int64 // rootfs downloads started
}

func startSlowMirror(dir string, perDownload time.Duration) (*slowMirror, error) {
	ln := takeSlowMirrorListener()
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, err
		}
	}
	m := &slowMirror{dir: dir, perDownload: perDownload, url: "http://" + ln.Addr().String() + "/releases/latest"}
	m.srv = &http.Server{Handler: m, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = m.srv.Serve(ln) }()
	return m, nil
}

// slowMirrorLn is the slow mirror's address, taken before the cluster
// starts: the Job policy admits an upgrade's --source only when it is one
// of the manifest's release sources, so the package's access objects name
// it (accessOptions). The first slow mirror serves on it.
var slowMirrorLn struct {
	sync.Mutex
	ln net.Listener
}

// reserveSlowMirror listens on the slow mirror's address and returns its URL.
func reserveSlowMirror() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	slowMirrorLn.Lock()
	defer slowMirrorLn.Unlock()
	slowMirrorLn.ln = ln
	return "http://" + ln.Addr().String() + "/releases/latest", nil
}

func takeSlowMirrorListener() net.Listener {
	slowMirrorLn.Lock()
	defer slowMirrorLn.Unlock()
	ln := slowMirrorLn.ln
	slowMirrorLn.ln = nil
	return ln
}

func (m *slowMirror) close() { _ = m.srv.Close() }

func (m *slowMirror) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rel, ok := strings.CutPrefix(r.URL.Path, "/releases/download/")
	if !ok || strings.Contains(rel, "..") {
		http.NotFound(w, r)
		return
	}
	b, err := os.ReadFile(filepath.Join(m.dir, filepath.FromSlash(rel)))
	if err != nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	if !strings.Contains(rel, "rootfs") {
		_, _ = w.Write(b)
		return
	}
	m.rootfsReads.Add(1)
	m.throttle(w, r, b)
}

// throttle writes b in even parts every 100 ms, so that it takes perDownload.
func (m *slowMirror) throttle(w http.ResponseWriter, r *http.Request, b []byte) {
	const tick = 100 * time.Millisecond
	parts := max(1, int(m.perDownload/tick))
	chunk := max(1, (len(b)+parts-1)/parts)
	start := time.Now()
	for i := 0; len(b) > 0; i++ {
		if wait := time.Until(start.Add(time.Duration(i) * tick)); wait > 0 {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(wait):
			}
		}
		n := min(chunk, len(b))
		if _, err := w.Write(b[:n]); err != nil {
			return
		}
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		b = b[n:]
	}
}
