// Package e2e runs the UpdateChannel rollout end to end on the simulated
// cluster (ops/testenv with Cluster): fake nodes, one `slipway ops agent`
// process per node started by the node supervisor, each on its own system
// directory installed at v1 by `slipway ops upgrade` from a local mirror,
// one `slipway ops controller` process, upgrade Jobs run for real by the
// node executor, reboots simulated.
package e2e

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

	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/crds"
	"slipway.dev/slipway/ops/e2e/benchside"
	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/upgrade/releasetest"
)

var (
	env    *testenv.Env
	mirror string
	// slowMirrorURL is where the slow mirror serves, reserved before the cluster starts (slowmirror_test.go).
	slowMirrorURL string
	// auditLog is the apiserver's log of every write: who wrote what, when.
	auditLog string
	nodes    = 10 // 100 when benchmarks run (SLIPWAY_BENCH_NODES overrides)
	// simReboot is how long a simulated reboot keeps a node down.
	simReboot = time.Second
	// lease is the agents' --lease-duration: short, so tests see handovers soon.
	lease = "6s"
	// upgradeCommand is the agents' --upgrade-command: the upgrade Jobs run it.
	upgradeCommand = "slipway"
	// kcmQPS is kube-controller-manager's --kube-api-qps in benchmarks (0: its default).
	kcmQPS int
)

// binDir is on every simulated node's PATH (slipway, slipway-sim); workDir
// holds it and the controller's files.
var binDir, workDir string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	flag.Parse()
	if testing.Short() || os.Getenv(testenv.EnvSkip) == "1" {
		return testenv.RunMain(m, testenv.Options{}, &env) // starts nothing; tests skip
	}
	bench := flag.Lookup("test.bench").Value.String() != ""
	if bench {
		nodes, simReboot, lease = 100, benchReboot, benchLease
		if benchUpgrade > 0 {
			upgradeCommand = "slipway-sim take " + benchUpgrade.String() + " slipway"
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
	}
	dir, err := os.MkdirTemp("", "slipway-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "bin")
	binDir, workDir = bin, dir
	mirror = filepath.Join(dir, "mirror")
	auditLog = filepath.Join(dir, "audit.log")
	if slowMirrorURL, err = reserveSlowMirror(); err != nil {
		fmt.Fprintln(os.Stderr, "reserve the slow mirror's address:", err)
		return 1
	}
	if err := build(bin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, v := range []string{"v1", "v2"} {
		if _, err := releasetest.Write(releasetest.Options{Mirror: mirror, Version: v}); err != nil {
			fmt.Fprintln(os.Stderr, "write release:", err)
			return 1
		}
	}
	code := testenv.RunMain(m, testenv.Options{
		Cluster: true, Nodes: nodes, CRDs: crds.Must(), Timeout: 10 * time.Minute,
		ExecPath:    bin + ":/usr/local/bin:/usr/bin:/bin",
		NodeCommand: []string{"/bin/sh", "-c", nodeScript},
		NodeEnv: append([]string{"SLIPWAY_E2E_MIRROR=" + mirror, "SLIPWAY_E2E_REBOOT=" + simReboot.String(),
			"SLIPWAY_E2E_LEASE=" + lease, "SLIPWAY_E2E_UPGRADE_COMMAND=" + upgradeCommand}, benchAgentEnv()...),
		AuditLog: auditLog, AuditReads: !bench || os.Getenv("SLIPWAY_BENCH_AUDIT_READS") != "", // reads too: a closer look at one run (SLIPWAY_BENCH_KEEP_AUDIT)
		NodeIdentity: agentIdentity, ControllerManagerQPS: kcmQPS,
		Setup: func(ctx context.Context, cfg *rest.Config) error {
			if err := grantAgentAccess(ctx, cfg); err != nil {
				return err
			}
			return startController(cfg, bin, dir)
		},
	}, &env)
	stopController()
	// A whole run's audit log holds every call the agents and the controller make in a rollout.
	if code == 0 && !bench && flag.Lookup("test.run").Value.String() == "" {
		if err := checkAgentAccess(auditLog); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: TestMain:", err)
			return 1
		}
	}
	return code
}

// nodeScript is each fake node's "boot" (testenv.K3osNode): install v1 on
// first boot; at each boot (not at an agent's restart within one) write the
// kernel command line slipway's loader would pass, naming the rootfs
// `current` names; then run the agent.
var nodeScript = testenv.K3osNode{
	Mirror: `"$SLIPWAY_E2E_MIRROR"`, Kubeconfig: `"$SLIPWAY_NODE_DIR/kubeconfig-node"`, Image: "slipway:e2e",
	Lease: `"$SLIPWAY_E2E_LEASE"`, Backoff: "1h", Upgrade: `"$SLIPWAY_E2E_UPGRADE_COMMAND"`,
	Reboot: `"slipway-sim reboot --delay $SLIPWAY_E2E_REBOOT"`,
}.Script()

// build compiles slipway and slipway-sim into bin as scripts/build does for
// a release (static, stripped), so the agents' memory is what a node sees.
func build(bin string) error {
	for pkg, name := range map[string]string{"../../cmd/slipway": "slipway", "../testenv/cmd/slipway-sim": "slipway-sim"} {
		if err := goBuild(pkg, filepath.Join(bin, name), "-s -w"); err != nil {
			return err
		}
	}
	return nil
}

// goBuild builds the static binary of pkg into out with ldflags.
func goBuild(pkg, out, ldflags string) error {
	cmd := exec.CommandContext(context.Background(), "go", "build", "-trimpath", "-tags", "urfave_cli_no_docs", "-ldflags", ldflags, "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build %s: %w", filepath.Base(out), err)
	}
	return nil
}
