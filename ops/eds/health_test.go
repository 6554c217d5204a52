package eds

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Issue 27 item 2: the EDS controller's /healthz follows its workers (a
// sync wedged past its allowance turns it red, and it recovers), /readyz
// its informers.
func TestHealthzFailsOnAWedgedSync(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t)
	release := make(chan struct{})
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	h.startControllerWith(Options{Config: env.Config}, func(c *Controller) {
		c.loopAllowance = 2 * time.Second
		c.beforeSync = func(key string) {
			if key == h.ns+"/wedged" {
				<-release
			}
		}
	})
	mux := http.NewServeMux()
	h.ctrl.probe.Install(mux)
	probe := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, strings.TrimSpace(rec.Body.String())
	}
	for _, path := range []string{"/readyz", "/healthz"} {
		h.eventually(30*time.Second, path+" 200", func() (bool, string) {
			code, body := probe(path)
			return code == http.StatusOK, body
		})
	}
	h.create(daemon("wedged", "agent:v1"))
	h.eventually(30*time.Second, "/healthz 503 naming a worker", func() (bool, string) {
		code, body := probe("/healthz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "worker-"), body
	})
	close(release)
	released = true
	h.eventually(30*time.Second, "/healthz 200 again", func() (bool, string) {
		code, body := probe("/healthz")
		return code == http.StatusOK, body
	})
}
