package process

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestServeProfiles(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { ServeProfiles(ctx, addr, slog.New(slog.DiscardHandler)); close(done) }()
	var body string
	for deadline := time.Now().Add(5 * time.Second); ; {
		resp, err := http.Get("http://" + addr + "/debug/pprof/profile?seconds=1")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("a CPU profile: %s: %s", resp.Status, b)
			}
			body = string(b)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the profile server never answered: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A CPU profile is a gzipped protobuf: its first bytes are gzip's magic.
	if !strings.HasPrefix(body, "\x1f\x8b") {
		t.Errorf("the CPU profile is not a gzipped profile: %q", body[:min(len(body), 40)])
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the profile server did not stop with its context")
	}
}
