package channel

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// releaseServer mimics a GitHub-style release site: /<repo>/releases/latest
// redirects to .../tag/<version>, artifacts under .../download/<version>/.
func releaseServer(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /o/r/releases/latest", func(w http.ResponseWriter, r *http.Request) {
		if ua := r.Header.Get("User-Agent"); ua != "slipway-test" {
			http.Error(w, "want User-Agent slipway-test, got "+ua, http.StatusBadRequest)
			return
		}
		http.Redirect(w, r, "/o/r/releases/tag/v2.0.1+k3s1", http.StatusFound)
	})
	mux.HandleFunc("GET /o/r/releases/download/{version}/{artifact}", func(w http.ResponseWriter, r *http.Request) {
		v, a := r.PathValue("version"), r.PathValue("artifact")
		if v == "v2.0.1+k3s1" && a == "rootfs.tar.gz" {
			io.WriteString(w, "rootfs of "+v)
			return
		}
		if v == "v2.0.1+k3s1" && a == "redirected" {
			http.Redirect(w, r, "/storage/blob", http.StatusFound)
			return
		}
		http.NotFound(w, r)
	})
	mux.HandleFunc("GET /storage/blob", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "blob") })
	// Cut: announces 100 bytes, sends 10, closes the connection.
	mux.HandleFunc("GET /cut/download/v1/big", func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nContent-Type: application/octet-stream\r\n\r\n0123456789")
		buf.Flush()
	})
	mux.HandleFunc("GET /hop/latest", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/o/r/releases/latest", http.StatusMovedPermanently)
	})
	mux.HandleFunc("GET /loop/latest", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/loop/latest", http.StatusFound)
	})
	mux.HandleFunc("GET /static/latest", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "v3\n") })
	mux.HandleFunc("GET /html/latest", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "<html>hello</html>") })
	mux.HandleFunc("GET /empty/releases/latest", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/empty/releases", http.StatusFound)
	})
	mux.HandleFunc("GET /broken/latest", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	})
	mux.HandleFunc("GET /secret/latest", func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "user" || p != "hunter2" {
			http.Error(w, "want basic auth", http.StatusUnauthorized)
			return
		}
		http.NotFound(w, r)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestHTTPLatestAndOpen(t *testing.T) {
	srv := releaseServer(t)
	opts := Options{UserAgent: "slipway-test", HTTPClient: srv.Client()}
	for _, raw := range []string{srv.URL + "/o/r/releases/latest", srv.URL + "/o/r/releases"} {
		src := newSource(t, raw, opts)
		v, err := src.Latest(context.Background())
		if err != nil || v != "v2.0.1+k3s1" {
			t.Fatalf("%s: Latest = %q, %v", raw, v, err)
		}
		if got, size := readAll(t, src, v, "rootfs.tar.gz"); got != "rootfs of v2.0.1+k3s1" || size != int64(len(got)) {
			t.Fatalf("%s: artifact = %q (size %d)", raw, got, size)
		}
		if got, _ := readAll(t, src, v, "redirected"); got != "blob" {
			t.Fatalf("%s: redirected artifact = %q", raw, got)
		}
	}
}

func TestHTTPLatestVariants(t *testing.T) {
	srv := releaseServer(t)
	tests := []struct {
		path, want string
		notFound   bool
		errMatch   string
	}{
		{path: "/hop/latest", want: "v2.0.1+k3s1"},
		{path: "/static/latest", want: "v3"},
		{path: "/html/latest", errMatch: "is not a version"},
		{path: "/loop/latest", errMatch: "more than 5 redirects"},
		{path: "/empty/releases/latest", notFound: true, errMatch: "no release yet"},
		{path: "/broken/latest", errMatch: "500"},
		{path: "/nothing/latest", notFound: true, errMatch: "404"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			src := newSource(t, srv.URL+tt.path, Options{UserAgent: "slipway-test"})
			v, err := src.Latest(context.Background())
			if tt.errMatch == "" {
				if err != nil || v != tt.want {
					t.Fatalf("Latest = %q, %v; want %q", v, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.errMatch) || errors.Is(err, ErrNotFound) != tt.notFound {
				t.Fatalf("Latest = %q, %v; want an error with %q, ErrNotFound=%v", v, err, tt.errMatch, tt.notFound)
			}
		})
	}
}

func TestHTTPOpenNotFound(t *testing.T) {
	srv := releaseServer(t)
	src := newSource(t, srv.URL+"/o/r/releases/latest", Options{})
	for _, c := range [][2]string{{"v2.0.1+k3s1", "missing"}, {"v9", "rootfs.tar.gz"}} {
		rc, _, err := src.Open(context.Background(), c[0], c[1])
		if err == nil {
			rc.Close()
			t.Fatalf("Open(%s, %s) succeeded", c[0], c[1])
		}
		if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "/o/r/releases/download/"+c[0]+"/"+c[1]) {
			t.Fatalf("Open(%s, %s): %v; want ErrNotFound naming the URL", c[0], c[1], err)
		}
	}
}

func TestHTTPTruncatedBody(t *testing.T) {
	srv := releaseServer(t)
	src := newSource(t, srv.URL+"/cut/latest", Options{})
	rc, size, err := src.Open(context.Background(), "v1", "big")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer rc.Close()
	if size != 100 {
		t.Fatalf("size = %d, want the announced 100", size)
	}
	b, err := io.ReadAll(rc)
	if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), "truncated after 10 of 100 bytes") {
		t.Fatalf("read %d bytes, err %v; want a truncation error", len(b), err)
	}
}

func TestHTTPKeepsCredentialsOutOfMessages(t *testing.T) {
	srv := releaseServer(t)
	raw := strings.Replace(srv.URL, "http://", "http://user:hunter2@", 1) + "/secret/latest"
	src := newSource(t, raw, Options{})
	_, err := src.Latest(context.Background())
	if !errors.Is(err, ErrNotFound) { // a 401 would mean the credentials were not sent
		t.Fatalf("Latest = %v, want the 404 behind basic auth", err)
	}
	for _, s := range []string{src.String(), err.Error()} {
		if strings.Contains(s, "hunter2") {
			t.Fatalf("message leaks the password: %s", s)
		}
	}
	// An unreachable host: the transport error names the URL.
	src = newSource(t, "http://user:hunter2@127.0.0.1:1/latest", Options{})
	if _, err := src.Latest(context.Background()); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("unreachable host: %v", err)
	}
}

// The air-gapped recipe of docs/channels.md: a mirror directory with a
// `download -> .` link, served as-is by a static file server.
func TestHTTPServesMirrorDirectory(t *testing.T) {
	dir := writeMirror(t, map[string]string{"latest": "v2\n", "v1/a": "one", "v2/a": "two"})
	if err := os.Symlink(".", filepath.Join(dir, "download")); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	defer srv.Close()
	src := newSource(t, srv.URL+"/latest", Options{})
	v, err := src.Latest(context.Background())
	if err != nil || v != "v2" {
		t.Fatalf("Latest = %q, %v", v, err)
	}
	if got, size := readAll(t, src, v, "a"); got != "two" || size != 3 {
		t.Fatalf("artifact = %q size %d", got, size)
	}
	// The same tree still works as a mirror directory.
	if got, _ := readAll(t, newSource(t, dir, Options{}), "v1", "a"); got != "one" {
		t.Fatalf("mirror artifact = %q", got)
	}
	_, _, err = newSource(t, dir, Options{}).Open(context.Background(), "v9", "a")
	if err == nil || !strings.Contains(err.Error(), "versions present: v1, v2)") {
		t.Fatalf("missing version: %v", err)
	}
}

// Cancelling the context stops a download that the server has stalled.
func TestHTTPCancelStalledDownload(t *testing.T) {
	stalled := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		io.WriteString(w, "first")
		w.(http.Flusher).Flush()
		close(stalled)
		<-r.Context().Done()
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rc, _, err := newSource(t, srv.URL+"/latest", Options{}).Open(ctx, "v1", "a")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.ReadFull(rc, make([]byte, 5)); err != nil {
		t.Fatal(err)
	}
	<-stalled
	cancel()
	if _, err := io.ReadAll(rc); !errors.Is(err, context.Canceled) {
		t.Fatalf("read after cancel: %v, want context.Canceled", err)
	}
}

// An object store that labels a .tar.gz "Content-Encoding: gzip" must not
// make the client decompress it: the checksum is of the stored bytes.
func TestHTTPKeepsStoredEncoding(t *testing.T) {
	var stored bytes.Buffer
	zw := gzip.NewWriter(&stored)
	io.WriteString(zw, "tar content")
	zw.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ae := r.Header.Get("Accept-Encoding"); ae != "identity" {
			http.Error(w, "Accept-Encoding "+ae, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		w.Write(stored.Bytes())
	}))
	defer srv.Close()
	got, size := readAll(t, newSource(t, srv.URL+"/latest", Options{}), "v1", "rootfs.tar.gz")
	if got != stored.String() || size != int64(stored.Len()) {
		t.Fatalf("got %d bytes (size %d), want the %d stored bytes", len(got), size, stored.Len())
	}
}
