package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestClusterScriptUpDown runs `scripts/cluster up --nodes 2`, `status` and
// `down`, and checks that down leaves none of the recorded processes and no state.
func TestClusterScriptUpDown(t *testing.T) {
	if os.Getenv("SLIPWAY_SKIP_CLUSTER") == "1" || testing.Short() {
		t.Skip("no cluster: SLIPWAY_SKIP_CLUSTER=1 or -short")
	}
	script, err := filepath.Abs("../../../../scripts/cluster")
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "cluster")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(script, args...)
		cmd.Env = append(os.Environ(), "SLIPWAY_CLUSTER_DIR="+state)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("scripts/cluster %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	t.Cleanup(func() { // stops this test's cluster (only) if the test failed half-way
		cmd := exec.Command(script, "down")
		cmd.Env = append(os.Environ(), "SLIPWAY_CLUSTER_DIR="+state)
		_ = cmd.Run()
	})
	out := run("up", "--nodes", "2", "--node-identity", "slipway-system/slipway-agent")
	if !strings.Contains(out, "export KUBECONFIG="+filepath.Join(state, "kubeconfig")) {
		t.Errorf("up did not print the KUBECONFIG export:\n%s", out)
	}
	node, err := os.ReadFile(filepath.Join(state, "nodes", "node-2", "kubeconfig-node"))
	if err != nil {
		t.Errorf("--node-identity: no node kubeconfig: %v", err)
	}
	for _, want := range []string{"as: system:serviceaccount:slipway-system:slipway-agent", "authentication.kubernetes.io/node-name:\n      - node-2"} {
		if !strings.Contains(string(node), want) {
			t.Errorf("node-2's kubeconfig lacks %q:\n%s", want, node)
		}
	}
	if out := run("kubeconfig", "--as", "slipway-system/slipway-controller"); !strings.Contains(out, "as: system:serviceaccount:slipway-system:slipway-controller") {
		t.Errorf("kubeconfig --as printed:\n%s", out)
	}
	pids := readPids(t, filepath.Join(state, "pids"))
	if len(pids) != 6 {
		t.Errorf("recorded pids %v, want slipway-sim and 5 control-plane processes", pids)
	}
	if out := run("status"); !strings.Contains(out, "2/2 fake nodes Ready") {
		t.Errorf("status:\n%s", out)
	}
	run("down")
	for name, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("%s (pid %d) still running after down", name, pid)
		}
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("state %s left behind (%v)", state, err)
	}
}

func TestUpRefusesABadNodeIdentity(t *testing.T) {
	err := up(context.Background(), []string{"--dir", t.TempDir(), "--node-identity", "slipway-agent"})
	if err == nil || !strings.Contains(err.Error(), "NAMESPACE/NAME") {
		t.Errorf("up --node-identity slipway-agent: %v, want an error naming the NAMESPACE/NAME form", err)
	}
}

func readPids(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pids := map[string]int{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		name, pid, _ := strings.Cut(s.Text(), " ")
		n, err := strconv.Atoi(pid)
		if err != nil {
			t.Fatalf("pids line %q: %v", s.Text(), err)
		}
		pids[name] = n
	}
	return pids
}
