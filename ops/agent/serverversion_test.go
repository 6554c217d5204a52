package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	apiversion "k8s.io/apimachinery/pkg/version"

	"slipway.dev/slipway/ops/process"
	"slipway.dev/slipway/ops/testenv"
)

// TestAgentWaitsForASupportedServer: against an API server older than
// 1.30 the agent does nothing and says why (in its log, each recheck);
// against the test's real apiserver it goes on.
func TestAgentWaitsForASupportedServer(t *testing.T) {
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/version" {
			http.Error(w, "not expected", http.StatusTeapot)
			t.Errorf("the agent went on to %s %s", r.Method, r.URL.Path)
			return
		}
		_ = json.NewEncoder(w).Encode(apiversion.Info{Major: "1", Minor: "29", GitVersion: "v1.29.4"})
	}))
	defer old.Close()
	defer func(d time.Duration) { process.ServerRecheck = d }(process.ServerRecheck)
	process.ServerRecheck = 100 * time.Millisecond
	var logs bytes.Buffer
	// Ten rechecks a second: client-go's default rate (5/s, burst 10) would
	// refuse the last one as "would exceed context deadline" instead.
	a, err := New(Options{NodeName: "n", Config: &rest.Config{Host: old.URL, QPS: 100, Burst: 100}, Rebooter: fakeRebooterNone{}, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err = a.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "v1.29.4") || !strings.Contains(err.Error(), "1.30") {
		t.Fatalf("Run = %v, want the version error", err)
	}
	if n := strings.Count(logs.String(), "unsupported Kubernetes version"); n < 2 {
		t.Errorf("%d log lines, want one per recheck:\n%s", n, logs.String())
	}

	testenv.Need(t, env) // the second half asks the test's real apiserver
	b, err := New(Options{NodeName: "n", Config: env.Config, Rebooter: fakeRebooterNone{}, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := process.WaitForSupportedServer(context.Background(), b.kube, b.log); err != nil {
		t.Fatalf("the test's apiserver: %v", err)
	}
}

type fakeRebooterNone struct{}

func (fakeRebooterNone) Reboot(context.Context) error { return nil }
func (fakeRebooterNone) String() string               { return "none" }

// TestProbesServedWhileWaitingForAServer: an agent waiting for a supported
// API server is alive (its liveness probe answers 200, so the kubelet
// does not restart it into CrashLoopBackOff) and not ready.
func TestProbesServedWhileWaitingForAServer(t *testing.T) {
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(apiversion.Info{Major: "1", Minor: "29", GitVersion: "v1.29.4"})
	}))
	defer old.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	a, err := New(Options{NodeName: "n", Config: &rest.Config{Host: old.URL}, Rebooter: fakeRebooterNone{}, MetricsAddr: addr,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	status := func(path string) int {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	deadline := time.Now().Add(30 * time.Second)
	for status("/healthz") != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("no liveness answer while the agent waits for a supported API server")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := status("/readyz"); got == http.StatusOK {
		t.Errorf("/readyz = %d while the agent waits: it is not ready", got)
	}
}
