// Package e2e is the update operator as it runs in a cluster, on the
// simulated one: one `slipway update-operator agent` process per fake node
// (the command platform, a fixed host time per update, reboots through the
// supervisor) and controller processes. Two uses share it: the benchmark
// (100 nodes) and, in a plain `go test`, the
// chaos test that kills those processes with SIGKILL (8 nodes).
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

	"slipway.dev/slipway/ops/testenv"
)

// What the package's cluster was started for.
const (
	modeBench = "bench"
	modeChaos = "chaos"
)

var (
	mode      string
	env       *testenv.Env
	bin       string // holds slipway and slipway-sim
	shared    string // the scripts and the release file every node reads
	auditLog  string
	nodes     = 10
	agents    int                                                        // the first this many nodes run an agent; the others idle, labelled exclude=true (all by default)
	hostTime  = envDuration("SLIPWAY_UO_BENCH_HOST_TIME", 2*time.Second) // prepare's fixed time
	downTime  = envDuration("SLIPWAY_UO_BENCH_REBOOT", 3*time.Second)    // a reboot's downtime
	applyTime time.Duration                                              // perform-update's fixed time (a round's apply=D)
)

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d >= 0 {
		return d
	}
	return def
}

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	flag.Parse()
	bench := flag.Lookup("test.bench") != nil && flag.Lookup("test.bench").Value.String() != ""
	if testing.Short() || os.Getenv(testenv.EnvSkip) == "1" {
		return m.Run() // env stays nil: tests skip
	}
	switch {
	case bench:
		mode, nodes = modeBench, 100
	default:
		mode, nodes = modeChaos, chaosNodes
		hostTime = envDuration("SLIPWAY_UO_BENCH_HOST_TIME", chaosHostTime)
		downTime = envDuration("SLIPWAY_UO_BENCH_REBOOT", chaosDownTime)
	}
	if n, err := strconv.Atoi(os.Getenv("SLIPWAY_UO_BENCH_NODES")); err == nil && n > 0 {
		nodes = n
	}
	agents = nodes
	if n, err := strconv.Atoi(os.Getenv("SLIPWAY_UO_BENCH_AGENTS")); err == nil && n > 0 && n < nodes {
		agents = n
	}
	dir, err := os.MkdirTemp("", "slipway-uo-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin, shared, auditLog = filepath.Join(dir, "bin"), filepath.Join(dir, "shared"), filepath.Join(dir, "audit.log")
	if err := build(bin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := writeScripts(shared, "v1"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := useBin(contenders()[0].bin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return testenv.RunMain(m, testenv.Options{
		Cluster: true, Nodes: nodes, Timeout: 10 * time.Minute,
		ExecPath:    bin + ":/usr/local/bin:/usr/bin:/bin",
		NodeCommand: agentCommand(),
		AuditLog:    auditLog,
		AuditReads:  mode == modeBench, // the controller's reads per node
	}, &env)
}

// agentCommand is each fake node's agent on the command platform (on the
// first agents nodes, node-1 on; the others, by the number that ends their
// name, sleep). With contenders to compare (ab_test.go), the binary is the
// one named in shared/agent-bin when the agent starts.
func agentCommand() []string {
	sh := func(s string) string { return "/bin/sh " + filepath.Join(shared, s) }
	slipway := filepath.Join(bin, "slipway")
	if len(contenders()) > 1 {
		slipway = "$(cat " + filepath.Join(shared, "agent-bin") + ")"
	}
	agent := []string{slipway, "update-operator", "agent", "--platform", "command",
		"--check-command", sh("check.sh"), "--prepare-command", sh("prepare.sh"), "--apply-command", sh("apply.sh"),
		"--reboot-command", sh("reboot.sh"), "--version-command", sh("version.sh"), "--reset-command", sh("reset.sh"),
		"--check-interval", "2s", "--health-addr", ""}
	run := fmt.Sprintf(`exec %s "$@" --boot-id-file "$SLIPWAY_NODE_DIR/run/boot_id"`, agent[0])
	script := nodeStart + run
	if agents < nodes || len(contenders()) > 1 {
		script = fmt.Sprintf(`i=${NODE_NAME##*[!0-9]}; if [ "$i" -gt %d ]; then exec sleep 1000000; fi; `, agents) + script
	}
	return append([]string{"/bin/sh", "-c", script, "agent-or-idle"}, agent[1:]...)
}

// nodeStart begins each start of a fake node's command. Each simulated
// boot has a boot ID of its own, in the node's /run (emptied by the
// reboot), as the kernel's is for a real host. A boot (no boot ID in /run
// yet: not an agent restarted within the boot) starts the version
// apply.sh made next, as a host boots the partition its update flipped to.
const nodeStart = `cd "$SLIPWAY_NODE_DIR" && if [ ! -e run/boot_id ] && [ -f next ]; then mv next version; fi && ` +
	`mkdir -p run && echo "$NODE_NAME-boot-$SLIPWAY_NODE_BOOT" > run/boot_id; `

// writeScripts writes the host's commands: the node's running version
// lives in its directory (version), the release every node should run in
// shared/release. As on a real host, perform-update (apply.sh) only sets
// the version the next boot starts (next; the boot script of agentCommand
// makes it the running one), and reset-state (reset.sh) discards it: a
// node is at a new version only after a reboot.
func writeScripts(dir, release string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	scripts := map[string]string{
		"version.sh": `cat version 2>/dev/null || echo v1`,
		"check.sh":   `cat ` + filepath.Join(dir, "release"),
		"prepare.sh": fmt.Sprintf(`sleep %g; cat %s > staged`, hostTime.Seconds(), filepath.Join(dir, "release")),
		"apply.sh":   fmt.Sprintf(`sleep %g; cp staged next`, applyTime.Seconds()),
		"reset.sh":   `rm -f staged next`,
		"reboot.sh":  fmt.Sprintf(`exec slipway-sim reboot --delay %s`, downTime),
	}
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("set -e\n"+body+"\n"), 0o755); err != nil {
			return err
		}
	}
	return writeRelease(dir, release)
}

// setRelease makes v the release every node should run.
func setRelease(v string) error { return writeRelease(shared, v) }

func writeRelease(dir, v string) error {
	return os.WriteFile(filepath.Join(dir, "release"), []byte(v+"\n"), 0o644)
}

// build compiles slipway and slipway-sim as a release is built (static, stripped).
func build(bin string) error {
	for pkg, name := range map[string]string{"../../../cmd/slipway": "slipway", "../../testenv/cmd/slipway-sim": "slipway-sim"} {
		cmd := exec.CommandContext(context.Background(), "go", "build", "-trimpath", "-tags", "urfave_cli_no_docs", "-ldflags", "-s -w", "-o", filepath.Join(bin, name), pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("build %s: %w", name, err)
		}
	}
	return nil
}
