package controller

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// TestWedgedControllerFailsHealthz (issue 27 item 2): the controller is
// ready once its informers synced and healthy while its worker takes its
// pulses; a worker wedged in a sync turns /healthz red within the
// allowance, and green again once it goes on.
func TestWedgedControllerFailsHealthz(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	f.StopController() // this test runs its own
	a, err := newController(Options{Identity: "probe-" + f.NS, Namespace: f.NS, Config: env.Config, LoopAllowance: 2 * time.Second,
		LeaseDuration: 3 * time.Second, Log: slog.New(slog.NewTextHandler(f.LogFile(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	var srv *httptest.Server
	status := func(path string) int {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	wait := func(what, path string, want int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for status(path) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s never answered %d", what, path, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for a.probe == nil || !a.elected.Load() { // started and leading
		time.Sleep(20 * time.Millisecond)
	}
	mux := http.NewServeMux()
	a.probe.Install(mux)
	srv = httptest.NewServer(mux)
	defer srv.Close()
	wait("started", "/readyz", http.StatusOK)
	wait("idle", "/healthz", http.StatusOK)
	a.mu.Lock() // the next sync of a channel's fleet view blocks on it: the worker is wedged
	unwedge := sync.OnceFunc(a.mu.Unlock)
	t.Cleanup(unwedge) // before the controller stops (cleanups run last first)
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", NodeSelector: f.Selector()})
	wait("wedged", "/healthz", http.StatusServiceUnavailable)
	if got := status("/readyz"); got != http.StatusOK {
		t.Errorf("/readyz of a wedged controller %d, want 200: its informers are synced", got)
	}
	unwedge()
	wait("going on", "/healthz", http.StatusOK)
}
