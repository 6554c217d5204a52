package supervisor

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestSocketRejectsBadRequests sends requests that must be refused before
// anything happens to a node (the client is never used: no API server needed).
func TestSocketRejectsBadRequests(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(&rest.Config{Host: "http://127.0.0.1:1"})
	s, err := New(Options{Client: cs, Nodes: []string{"node-1"}, NodesRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sock := filepath.Join(t.TempDir(), "sim.sock")
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, sock) }()
	tests := []struct {
		req  Request
		want string
	}{
		{Request{Op: "halt", Node: "node-1"}, "unknown op"},
		{Request{Op: "reboot", Node: "node-2"}, "not supervised"},
		{Request{Op: "reboot", Node: "node-1", Delay: "soon"}, "delay"},
	}
	for _, tt := range tests {
		var err error
		for range 50 { // the listener may not be up yet
			if err = Send(ctx, sock, tt.req); err == nil || !strings.Contains(err.Error(), "reach the supervisor") {
				break
			}
			waitABit(ctx)
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: error %v, want one containing %q", tt.req, err, tt.want)
		}
	}
	if s.Boots("node-1") != 0 {
		t.Error("a refused request changed the node")
	}
	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

func TestStoppedSupervisorStartsNothing(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(&rest.Config{Host: "http://127.0.0.1:1"})
	s, err := New(Options{Client: cs, Nodes: []string{"node-1"}, NodesRoot: t.TempDir(), Command: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	pid := s.Pids()["node-1"]
	if pid == 0 || s.Boots("node-1") != 1 {
		t.Fatalf("pid %d, boots %d after Start", pid, s.Boots("node-1"))
	}
	s.Stop()
	if len(s.Pids()) != 0 {
		t.Errorf("pids %v after Stop", s.Pids())
	}
	if err := s.startNode("node-1"); err == nil {
		t.Error("a command started after Stop")
		s.Stop()
	}
}

func waitABit(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(20 * time.Millisecond):
	}
}
