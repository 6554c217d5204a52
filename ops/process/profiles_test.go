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
	defer cancel()
	if err := ServeProfiles(ctx, addr, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/debug/pprof/profile?seconds=1")
	if err != nil {
		t.Fatalf("a CPU profile: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a CPU profile: %s: %s", resp.Status, body)
	}
	// A CPU profile is a gzipped protobuf: its first bytes are gzip's magic.
	if !strings.HasPrefix(string(body), "\x1f\x8b") {
		t.Errorf("the CPU profile is not a gzipped profile: %q", body[:min(len(body), 40)])
	}
	cancel()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/debug/pprof/")
		if err != nil {
			break // stopped with its context
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("the profile server did not stop with its context")
		}
	}
}

func TestServeProfilesOnATakenAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := ServeProfiles(context.Background(), l.Addr().String(), slog.New(slog.DiscardHandler)); err == nil {
		t.Error("serving profiles on a taken address was not an error")
	}
	if err := ServeProfiles(context.Background(), "", slog.New(slog.DiscardHandler)); err != nil {
		t.Errorf("no address (off) is an error: %v", err)
	}
}
