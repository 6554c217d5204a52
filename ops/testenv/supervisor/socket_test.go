package supervisor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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
	if err := s.startNode("node-1", true); err == nil {
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

// TestCrashRestartsTheCommandOnTheSameBoot: Crash kills the command and
// starts a new one at once, counting no boot; after Stop it does nothing.
func TestCrashRestartsTheCommandOnTheSameBoot(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(&rest.Config{Host: "http://127.0.0.1:1"})
	s, err := New(Options{Client: cs, Nodes: []string{"node-1"}, NodesRoot: t.TempDir(), Command: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	old := s.Pids()["node-1"]
	crashed, err := s.Crash("node-1")
	if err != nil || !crashed {
		t.Fatalf("Crash = %v, %v", crashed, err)
	}
	if pid := s.Pids()["node-1"]; pid == 0 || pid == old {
		t.Errorf("pid %d after the crash of %d: want a new command", pid, old)
	}
	if err := syscall.Kill(old, 0); err == nil {
		t.Errorf("the crashed command %d still runs", old)
	}
	if b := s.Boots("node-1"); b != 1 {
		t.Errorf("boots = %d after a crash, want 1 (a crash is no reboot)", b)
	}
	if crashed, _ := s.Crash("node-2"); crashed {
		t.Error("crashed a node that is not supervised")
	}
	s.Stop()
	if crashed, _ := s.Crash("node-1"); crashed || len(s.Pids()) != 0 {
		t.Errorf("Crash after Stop: crashed %v, pids %v", crashed, s.Pids())
	}
}

// TestNodeCommandGetsNoInheritedSlipwayEnv: a SLIPWAY_* variable of the
// caller's environment does not reach a node's command; the ones the
// Options and the supervisor give it do.
func TestNodeCommandGetsNoInheritedSlipwayEnv(t *testing.T) {
	t.Setenv("SLIPWAY_REBOOT", "false")
	t.Setenv("SLIPWAY_TEST_INHERITED", "x")
	cs := kubernetes.NewForConfigOrDie(&rest.Config{Host: "http://127.0.0.1:1"})
	root := t.TempDir()
	s, err := New(Options{Client: cs, Nodes: []string{"node-1"}, NodesRoot: root,
		Command: []string{"sh", "-c", "env > env.txt && sleep 100"}, Env: []string{"SLIPWAY_GIVEN=yes"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	var env string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(filepath.Join(s.NodeDir("node-1"), "env.txt"))
		if err == nil && strings.Contains(string(b), "NODE_NAME=") {
			env = string(b)
			break
		}
	}
	for _, want := range []string{"SLIPWAY_GIVEN=yes", "NODE_NAME=node-1", "SLIPWAY_NODE_DIR=", "SLIPWAY_NODE_BOOT=1"} {
		if !strings.Contains(env, want) {
			t.Errorf("the node's command lacks %s:\n%s", want, env)
		}
	}
	for _, leaked := range []string{"SLIPWAY_REBOOT=", "SLIPWAY_TEST_INHERITED="} {
		if strings.Contains(env, leaked) {
			t.Errorf("the node's command inherited %s from the caller", leaked)
		}
	}
}
