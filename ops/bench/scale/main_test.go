package scale

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/crds"
	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/testenv/standin"
	"slipway.dev/slipway/upgrade/releasetest"
)

// The run's settings, from the environment (scripts/bench-scale sets them).
var (
	env       *testenv.Env
	contender = envString("SLIPWAY_SCALE_CONTENDER", "slipway") // slipway or suc
	nodes     = envInt("SLIPWAY_SCALE_NODES", 1000)
	realEvery = envInt("SLIPWAY_SCALE_REAL_EVERY", 50) // every nth node runs a real agent process (slipway)
	// concurrency is both contenders' (the channel's, the plan's): 10 by
	// default; 50 at 5,000 nodes keeps the rollout near the 1,000-node
	// one's length (1 % of the fleet at once in both).
	concurrency = envInt("SLIPWAY_SCALE_CONCURRENCY", 10)
	// nodeLease is the fake nodes' Lease duration in seconds (a kubelet's
	// 40 by default); at 5,000 nodes a longer one keeps kwok's renewals from
	// filling kube-apiserver on two cores (testenv.Options.NodeLeaseSeconds).
	nodeLease = envInt("SLIPWAY_SCALE_NODE_LEASE", 40)
	// rolled is how many nodes the rollout moves (SLIPWAY_SCALE_ROLL; all by
	// default): the first ones, labelled rollLabel, which the channel's and
	// the plan's node selectors name. Every node runs its agent all the same,
	// as a DaemonSet does: a 500-node rollout in a 5,000-node cluster.
	rolled = rolledNodes(envInt("SLIPWAY_SCALE_ROLL", 0), nodes)
	sucBin = os.Getenv("SUC_BIN")
	// sucReboot gives SUC's plan a simulated reboot (SLIPWAY_SCALE_SUC_PLAN,
	// "reboot" by default), so both contenders do the same work: slipway's
	// channel reboots every node it rolls (0 s down). "noop" is the plan
	// without it, as the runs before 2026-11-29 measured SUC.
	sucReboot = envString("SLIPWAY_SCALE_SUC_PLAN", "reboot") == "reboot"
	// workLinger is the agents' work watch linger (SLIPWAY_SCALE_WORK_LINGER,
	// their default 5m): one past the run keeps every agent's Job and pod
	// watches open, as before the agent closed them.
	workLinger = envString("SLIPWAY_SCALE_WORK_LINGER", "5m")
	// withAudit has kube-apiserver log every write and every LIST and
	// watch of Nodes (SLIPWAY_SCALE_AUDIT=1), and the run count the
	// window's: the writes by client, verb and resource (who makes the
	// writes per node), the Node reads by client (who lists Nodes again,
	// after a watch ended as too slow). Off by default: the log costs the
	// API server CPU the figures would carry.
	withAudit  = os.Getenv("SLIPWAY_SCALE_AUDIT") == "1"
	binDir     string
	mirror     string
	realNodes  string // space-separated: the nodes whose agent is a process
	standNodes []string
)

const (
	ns    = "slipway-system"
	lease = "15s"
	// resync is the agent's and the controller's default: at 5,000 nodes a
	// shorter one makes the stand-ins' process (every agent's resync on two
	// cores) compete with kube-apiserver, a cost no real node shares.
	resync = "30s"
)

// auditFile is the API server's audit log in the state directory (withAudit).
const auditFile = "audit.log"

// rollLabel marks the nodes the rollout moves when it moves only some.
const rollLabel = "scale.slipway.dev/roll"

// rolledNodes is how many of nodes the rollout moves when asked for roll:
// all of them when roll is 0 or more than there are.
func rolledNodes(roll, nodes int) int {
	if roll <= 0 || roll > nodes {
		return nodes
	}
	return roll
}

func envString(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n >= 0 {
		return n
	}
	return def
}

var agentIdentity = testenv.ServiceAccount(ns, manifest.AgentName)
var controllerIdentity = testenv.ServiceAccount(ns, manifest.ControllerName)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	flag.Parse()
	if flag.Lookup("test.bench").Value.String() == "" || testing.Short() || os.Getenv(testenv.EnvSkip) == "1" {
		return m.Run() // benchmarks only: nothing to start
	}
	if contender != "slipway" && contender != "suc" {
		fmt.Fprintf(os.Stderr, "FAIL: SLIPWAY_SCALE_CONTENDER=%q: want slipway or suc\n", contender)
		return 1
	}
	if p := envString("SLIPWAY_SCALE_SUC_PLAN", "reboot"); p != "reboot" && p != "noop" {
		fmt.Fprintf(os.Stderr, "FAIL: SLIPWAY_SCALE_SUC_PLAN=%q: want reboot (the default) or noop\n", p)
		return 1
	}
	if st, err := os.Stat(sucBin); contender == "suc" && (sucBin == "" || err != nil || st.Mode()&0o111 == 0) {
		fmt.Fprintf(os.Stderr, "FAIL: SUC_BIN=%q is not an executable: set it to a system-upgrade-controller binary (scripts/bench-suc builds one)\n", sucBin)
		return 1
	}
	dir, err := os.MkdirTemp("", "slipway-scale-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir, mirror = filepath.Join(dir, "bin"), filepath.Join(dir, "mirror")
	if err := build(binDir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, v := range []string{"v1", "v2"} {
		if _, err := releasetest.Write(releasetest.Options{Mirror: mirror, Version: v}); err != nil {
			fmt.Fprintln(os.Stderr, "write release:", err)
			return 1
		}
	}
	names := make([]string, nodes)
	for i := range names {
		names[i] = fmt.Sprintf("node-%d", i+1) // testenv's default names
	}
	opts := testenv.Options{Cluster: true, Nodes: nodes, Timeout: 60 * time.Minute, Dir: filepath.Join(dir, "state"), NodeLeaseSeconds: nodeLease}
	if withAudit {
		opts.AuditLog, opts.AuditGets = filepath.Join(opts.Dir, auditFile), auditNodeReads
	}
	opts.APIServerProfiling = profileDir != ""
	tools := os.Getenv(testenv.EnvToolsDir)
	switch contender {
	case "suc":
		opts.ExecPath = binDir + ":" + tools + ":/usr/local/bin:/usr/bin:/bin"                 // kubectl for the pods' cordon, slipway-sim for their reboot
		opts.NodeEnv = []string{"SLIPWAY_SCALE_SOCKET=" + filepath.Join(opts.Dir, "sim.sock")} // the supervisor's (testenv puts it in Dir)
	case "slipway":
		var realList []string
		realList, standNodes = standin.Sample(names, realEvery)
		for _, n := range realList {
			realNodes += n + " "
		}
		opts.CRDs = crds.Must()
		opts.ExecPath = binDir + ":/usr/local/bin:/usr/bin:/bin"
		opts.NodeCommand = []string{"/bin/sh", "-c", nodeScript}
		opts.NodeEnv = []string{"SLIPWAY_SCALE_MIRROR=" + mirror, "SLIPWAY_SCALE_REAL=" + realNodes, "SLIPWAY_SCALE_LEASE=" + lease, "SLIPWAY_SCALE_RESYNC=" + resync, "SLIPWAY_SCALE_WORK_LINGER=" + workLinger}
		opts.NodeIdentity = agentIdentity
		opts.Setup = func(ctx context.Context, cfg *rest.Config) error {
			if err := grantAccess(ctx, cfg); err != nil {
				return err
			}
			return startController(cfg, dir)
		}
	}
	if path := os.Getenv("SLIPWAY_SCALE_SIM_LOG"); path != "" { // the executor's and the supervisor's log, for a run that stalls
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer f.Close()
		opts.Logger = slog.New(slog.NewTextHandler(f, nil))
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := testenv.RunMain(m, opts, &env)
	stopController()
	return code
}

// nodeScript is each fake node's boot: the sampled nodes install the first
// release and run a real agent process as the e2e nodes do; every other
// node's agent is a stand-in in the benchmark's process, which installs
// its node itself.
const nodeScript = `set -e
case " $SLIPWAY_SCALE_REAL " in *" $NODE_NAME "*) ;; *) exit 0 ;; esac
sys="$SLIPWAY_NODE_DIR/k3os/system"
mkdir -p "$sys" "$SLIPWAY_NODE_DIR/run/k3os"
if [ ! -e "$sys/k3os/current" ]; then
  slipway ops upgrade --system-dir "$sys" --source "$SLIPWAY_SCALE_MIRROR" --version v1 --rootfs --kernel \
    --reboot=false --lock-file "$SLIPWAY_NODE_DIR/run/k3os/upgrade.lock"
fi
if [ "$(cat "$SLIPWAY_NODE_DIR/cmdline.boot" 2>/dev/null)" != "$SLIPWAY_NODE_BOOT" ]; then
  echo "slipway.rootfs=$(basename "$(readlink "$sys/k3os/current")")" > "$SLIPWAY_NODE_DIR/cmdline"
  echo "$SLIPWAY_NODE_BOOT" > "$SLIPWAY_NODE_DIR/cmdline.boot"
fi
exec slipway ops agent --cmdline-file "$SLIPWAY_NODE_DIR/cmdline" --node-name "$NODE_NAME" --namespace slipway-system --system-dir "$sys" \
  --host-system-dir /k3os/system --host-lock-dir /run/k3os --image slipway:e2e \
  --reboot-method command --boot-id-from-node \
  --metrics-addr "" --kubeconfig "$SLIPWAY_NODE_DIR/kubeconfig-node" --lease-duration "$SLIPWAY_SCALE_LEASE" --resync "$SLIPWAY_SCALE_RESYNC" --retry-backoff 1h \
  --work-watch-linger "$SLIPWAY_SCALE_WORK_LINGER" \
  --upgrade-command slipway --reboot-command "slipway-sim reboot --delay 0s"
`

// accessOptions is the manifest as installed here: the Jobs run the
// e2e image and `slipway` and read the local mirror.
func accessOptions() manifest.Options {
	return manifest.Options{Namespace: ns, Image: "slipway:e2e", JobCommand: []string{"slipway"}, MirrorDirs: []string{mirror}}
}

// grantAccess creates the manifest's RBAC and admission policies.
func grantAccess(ctx context.Context, cfg *rest.Config) error {
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return testenv.CreateAccess(ctx, c, manifest.AccessObjects(accessOptions()))
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
