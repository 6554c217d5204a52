// Package suc runs rancher's system-upgrade-controller (SUC) on the same
// simulated cluster as ops/e2e runs slipway (ops/testenv with Cluster: fake
// nodes, kube-controller-manager and kube-scheduler at their default
// limits), so that scripts/bench-suc can put the two side by side. It holds
// benchmarks only; without -bench it starts nothing.
//
// SUC runs as a local process from the binary $SUC_BIN with the admin
// kubeconfig; it registers its own Plan CRD. Its Jobs' pods carry the label
// that hands them to the node executor (the plan's labels go onto its Jobs
// and pods), so each pod's command runs for real on its node like slipway's
// upgrade Jobs do: the cordon SUC's init container would do with kubectl is
// done by the same kubectl at the start of the upgrade container (the
// executor runs one container per pod), then the simulated host time.
package suc

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"slipway.dev/slipway/ops/e2e/benchside"
	"slipway.dev/slipway/ops/testenv"
)

// envBin names SUC's binary; scripts/bench-suc sets it.
const envBin = "SUC_BIN"

var (
	env   *testenv.Env
	nodes = 100 // SLIPWAY_BENCH_NODES overrides
	// sucBin is SUC's binary, simBin the directory holding slipway-sim.
	sucBin, simBin string
	// auditLog is the apiserver's log of every write.
	auditLog string
	// socket is the node supervisor's socket, for the pods' simulated reboots.
	socket string
	// kcmQPS is kube-controller-manager's --kube-api-qps (0: its default).
	kcmQPS int
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	flag.Parse()
	if flag.Lookup("test.bench").Value.String() == "" || testing.Short() || os.Getenv(testenv.EnvSkip) == "1" {
		return m.Run() // benchmarks only: nothing to start
	}
	sucBin = os.Getenv(envBin)
	if st, err := os.Stat(sucBin); sucBin == "" || err != nil || st.Mode()&0o111 == 0 {
		fmt.Fprintf(os.Stderr, "FAIL: $%s=%q is not an executable: set it to a system-upgrade-controller binary (scripts/bench-suc builds one)\n", envBin, sucBin)
		return 1
	}
	if n, err := strconv.Atoi(os.Getenv("SLIPWAY_BENCH_NODES")); err == nil && n > 0 {
		nodes = n
	}
	q, err := benchside.ControllerManagerQPS()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	kcmQPS = q
	dir, err := os.MkdirTemp("", "slipway-suc-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	simBin, auditLog = filepath.Join(dir, "bin"), filepath.Join(dir, "audit.log")
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	socket = filepath.Join(state, "sim.sock")
	if err := buildSim(simBin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tools := os.Getenv(testenv.EnvToolsDir) // kubectl for the pods' cordon
	return testenv.RunMain(m, testenv.Options{
		Cluster: true, Nodes: nodes, Timeout: 10 * time.Minute, Dir: state,
		ExecPath: simBin + ":" + tools + ":/usr/local/bin:/usr/bin:/bin",
		NodeEnv:  []string{"SUC_BENCH_SOCKET=" + socket},
		AuditLog: auditLog, ControllerManagerQPS: kcmQPS,
	}, &env)
}

// buildSim compiles slipway-sim (its `take` pads a pod's command to a fixed
// time, its `reboot` asks the supervisor to reboot the pod's node).
func buildSim(bin string) error {
	cmd := exec.CommandContext(context.Background(), "go", "build", "-trimpath", "-o", filepath.Join(bin, "slipway-sim"), "../../testenv/cmd/slipway-sim")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build slipway-sim: %w", err)
	}
	return nil
}
