package promtest

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLaunchOnATakenAddress: another server answers on the address given
// to Prometheus (FreeAddr's pick, taken before Prometheus listened on it,
// as by another test's server). launch says the address was taken, so that
// Start tries another, rather than handing the test the other server; and
// its cleanup returns (it waited for an exit already seen, and hung the
// test binary until its timeout).
func TestLaunchOnATakenAddress(t *testing.T) {
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/-/ready":
			_, _ = w.Write([]byte("Prometheus Server is Ready.\n"))
		case "/api/v1/status/flags":
			_, _ = w.Write([]byte(`{"status":"success","data":{"storage.tsdb.path":"/elsewhere"}}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer other.Close()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte("global:\n  scrape_interval: 1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t.Run("launch", func(t *testing.T) {
			s, err := launch(t, bin, dir, strings.TrimPrefix(other.URL, "http://"))
			if !errors.Is(err, errAddrTaken) {
				t.Errorf("launch on a taken address: %v (server %v), want %v", err, s, errAddrTaken)
			}
		})
	}()
	select {
	case <-finished:
	case <-time.After(2 * time.Minute): // a deadline for a hang, not a timing assertion
		t.Fatal("launch's cleanup did not return after Prometheus exited")
	}
}
