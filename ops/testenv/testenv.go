// Package testenv starts a real local Kubernetes control plane for tests, the
// demo and benchmarks: etcd and kube-apiserver on free loopback ports, the
// project's CRDs installed, and, when asked, a simulated cluster around them
// (kube-controller-manager, kube-scheduler and kwok with fake nodes).
//
// Pods bound to a fake node and labelled app.kubernetes.io/name=slipway-upgrade
// are not simulated by kwok: the executor package runs them as local processes.
package testenv

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/crds"
	"slipway.dev/slipway/ops/testenv/executor"
	"slipway.dev/slipway/ops/testenv/supervisor"
)

// Labels and annotations the simulated cluster uses.
const (
	// ExecutorLabelKey/ExecutorLabelValue mark pods that the node executor runs
	// for real; kwok's stages leave them alone.
	ExecutorLabelKey   = executor.LabelKey
	ExecutorLabelValue = executor.LabelValue
	// FakeNodeAnnotation marks nodes that kwok manages (and the executor serves).
	FakeNodeAnnotation      = executor.NodeAnnotation
	FakeNodeAnnotationValue = "fake"
	// NodeRoleLabel is set to "true" on every fake node.
	NodeRoleLabel = "node-role.slipway.dev/worker"
	// DownAnnotation, set to "true" on a fake node, makes kwok report it NotReady
	// and stop its heartbeat (a simulated reboot in progress).
	DownAnnotation = supervisor.DownAnnotation
)

// Options says what to start.
type Options struct {
	// Cluster adds kube-controller-manager, kube-scheduler, kwok and Nodes fake nodes.
	Cluster bool
	// Nodes is the number of fake nodes (Cluster only; default 3).
	Nodes int
	// NodePrefix names the fake nodes <prefix><i>, i from 1 (default "node-").
	NodePrefix string
	// CRDs are created and waited Established before Start returns.
	CRDs []*apiextv1.CustomResourceDefinition
	// ToolsDir holds the binaries; "" = run scripts/install-tools (builds what is missing).
	ToolsDir string
	// Dir is where state and logs go; "" = a new temp dir, removed by Stop.
	Dir string
	// Log receives the tails of the processes' logs when something fails (default os.Stderr).
	Log io.Writer
	// Timeout bounds the start of the processes (default 3m); building
	// missing binaries first is not bounded by it.
	Timeout time.Duration

	// ExecPath is the PATH-style list where the node executor looks up a pod
	// container's argv[0] by base name (e.g. a directory holding a built
	// slipway); "" = the test process's PATH.
	ExecPath string
	// NodeCommand, when set, is started once per fake node by the supervisor,
	// with NODE_NAME, SLIPWAY_NODE_DIR, SLIPWAY_SIM_SOCKET and KUBECONFIG set.
	NodeCommand []string
	// NodeEnv is added to the environment of node commands and executed pods.
	NodeEnv []string
	// NodeLeaseSeconds is the fake nodes' Lease duration (Cluster only):
	// kwok renews each Lease every quarter of it, as a kubelet does. 0 is a
	// kubelet's 40 s (a renewal every 10 s), and so is anything shorter. A fleet of thousands of fake
	// nodes on a few cores sets it longer: at 5,000 nodes the renewals alone
	// (500 a second) keep kube-apiserver busy on two cores. Longer than 40 s
	// raises kube-controller-manager's node monitor grace period with it, so
	// that a node is judged unreachable only after the same missed renewals.
	NodeLeaseSeconds int
	// NodeStatusReportPeriod is how often each fake node's simulated
	// kubelet reports its unchanged status (0: a kubelet's default, 5 min;
	// see the heartbeat package).
	NodeStatusReportPeriod time.Duration
	// Logger receives the executor's and supervisor's logs (default: discarded).
	Logger *slog.Logger
	// Progress, when set, receives one line per start step with its duration.
	Progress io.Writer
	// AuditLog, when set, is where kube-apiserver writes one JSON line per
	// write request (create, update, patch, delete) at Metadata level: who
	// wrote what and when. ReadAudit parses it.
	AuditLog string
	// AuditReads logs read requests (get, list, watch) too, so a test can
	// derive what a client calls from the log (ReadAuditAll). Off by
	// default: reads outnumber writes many times over.
	AuditReads bool
	// AuditGets, with AuditLog, logs the get and list requests these
	// name beside the writes (not watches): a client's live reads, few
	// enough to keep, that tell what it could have seen when it wrote.
	AuditGets []AuditGets
	// ControllerManagerQPS, when above 0, is kube-controller-manager's
	// --kube-api-qps (its burst twice that): the client limit each of its
	// controllers writes under (0: its default, 20 a second, burst 30). For
	// a benchmark that asks what a rollout's wall is bound by, set alike for
	// every contender.
	ControllerManagerQPS int
	// NodeIdentity, when set, gives every node command a kubeconfig of its
	// own, $SLIPWAY_NODE_DIR/kubeconfig-node, that acts as this identity on
	// that node: what a DaemonSet pod's bound service-account token is.
	NodeIdentity *Identity
	// Setup runs once the cluster is Ready and before any node command
	// starts (Cluster only): e.g. the RBAC that NodeIdentity needs.
	Setup func(ctx context.Context, cfg *rest.Config) error
	// APIServerProfiling serves kube-apiserver's Go profiles at
	// /debug/pprof/ to the admin credentials (off: --profiling=false).
	APIServerProfiling bool
	// OldKube runs kube-apiserver OldKubeVersion (the last k3os releases'
	// Kubernetes) instead of the pinned one, from $SLIPWAY_OLD_KUBE_TOOLS_DIR
	// or `scripts/install-tools --old-kube`. Without Cluster only.
	OldKube bool
}

// Identity is a user the admin credentials impersonate.
type Identity struct {
	User   string
	Groups []string
}

// Env is a running control plane.
type Env struct {
	// Config reaches the apiserver as a member of system:masters.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file with the same credentials.
	Kubeconfig string
	// Dir holds the state, the kubeconfig and one <process>.log per process.
	Dir string
	// Nodes are the fake nodes' names (Cluster only).
	Nodes []string
	// NodesRoot holds one directory per fake node, <NodesRoot>/<node>: the
	// node's root file system for executed pods and node commands.
	NodesRoot string
	// Socket is the supervisor's unix socket (`slipway-sim reboot` talks to it).
	Socket string
	// Supervisor runs the node commands and simulates reboots (Cluster only).
	Supervisor *supervisor.Supervisor

	opts     Options
	ownDir   bool
	procs    []*process
	stopOnce sync.Once
	stopSim  context.CancelFunc
	simDone  chan struct{}
}

// Start starts etcd and kube-apiserver (and the simulated cluster when
// opts.Cluster), installs opts.CRDs and returns once everything is ready.
// On failure everything it started is stopped again.
func Start(ctx context.Context, opts Options) (*Env, error) {
	opts = withDefaults(opts)
	// Building missing binaries takes many minutes on a fresh machine: not bounded by Timeout.
	if opts.OldKube && opts.Cluster {
		return nil, fmt.Errorf("testenv: OldKube starts etcd and kube-apiserver %s only; drop Cluster", OldKubeVersion)
	}
	tools, err := toolsDir(ctx, opts.ToolsDir, opts.Cluster, opts.OldKube)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	e := &Env{opts: opts, Dir: opts.Dir}
	if e.Dir == "" {
		if e.Dir, err = os.MkdirTemp("", "slipway-testenv-"); err != nil {
			return nil, fmt.Errorf("create the state directory: %w", err)
		}
		e.ownDir = true
	}
	if err := e.start(ctx, tools); err != nil {
		e.Stop()
		return nil, err
	}
	return e, nil
}

func withDefaults(o Options) Options {
	if o.Nodes <= 0 {
		o.Nodes = 3
	}
	if o.NodePrefix == "" {
		o.NodePrefix = "node-"
	}
	if o.Log == nil {
		o.Log = os.Stderr
	}
	if o.Timeout <= 0 {
		o.Timeout = 3 * time.Minute
	}
	return o
}

func (e *Env) start(ctx context.Context, tools string) error {
	err := e.step("etcd and kube-apiserver ready", func() error { return e.startControlPlane(ctx, tools) })
	if err == nil {
		err = e.step(fmt.Sprintf("%d CRDs established", len(e.opts.CRDs)), func() error { return crds.ApplyObjects(ctx, e.Config, e.opts.CRDs) })
	}
	if err != nil || !e.opts.Cluster {
		return err
	}
	err = e.step(fmt.Sprintf("controller-manager, scheduler, kwok and %d fake nodes Ready", e.opts.Nodes),
		func() error { return e.startCluster(ctx, tools) })
	if err != nil {
		return err
	}
	if e.opts.Setup != nil {
		if err := e.step("setup", func() error { return e.opts.Setup(ctx, e.Config) }); err != nil {
			return fmt.Errorf("setup: %w", err)
		}
	}
	return e.step("node executor and supervisor started", func() error { return e.startNodeSim(ctx) })
}

// step runs fn and reports its duration to opts.Progress.
func (e *Env) step(what string, fn func() error) error {
	start := time.Now()
	err := fn()
	if e.opts.Progress != nil && err == nil {
		fmt.Fprintf(e.opts.Progress, "testenv: %s in %.1fs\n", what, time.Since(start).Seconds())
	}
	return err
}

// Pids are the process ids of everything the Env started.
func (e *Env) Pids() map[string]int {
	m := make(map[string]int, len(e.procs))
	for _, p := range e.procs {
		m[p.name] = p.Pid()
	}
	return m
}

// DumpLogs writes the last n lines of each process's log to w.
func (e *Env) DumpLogs(w io.Writer, n int) { writeTail(w, e.procs, n) }

// Stop stops every process Start started, newest first, and removes the state
// directory when Start created it. It is safe to call more than once.
func (e *Env) Stop() {
	e.stopOnce.Do(func() {
		e.stopNodeSim()
		for i := len(e.procs) - 1; i >= 0; i-- {
			e.procs[i].stop(10 * time.Second)
		}
		if e.ownDir {
			_ = os.RemoveAll(e.Dir)
		}
	})
}

// addProcess starts a process and remembers it for Stop.
func (e *Env) addProcess(name, bin string, args ...string) (*process, error) {
	p, err := startProcess(name, e.Dir, bin, args, minimalEnv())
	if err != nil {
		return nil, err
	}
	e.procs = append(e.procs, p)
	return p, nil
}

// minimalEnv is the environment of the control-plane processes: no proxies or
// kubeconfig of the caller's leak into them.
func minimalEnv() []string {
	return []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + os.TempDir()}
}
