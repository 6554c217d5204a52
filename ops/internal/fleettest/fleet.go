// Package fleettest is the test harness of the node agent (ops/agent) and
// the controller (ops/controller): a namespace on a real API server
// (ops/testenv) with fake nodes, one in-process agent per node on a system
// directory of its own, a controller, and a stand-in for the kubelet that
// runs the upgrade Jobs. Both packages' tests start both programs through
// it; it imports neither (Programs).
package fleettest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/generated/clientset/versioned"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/upgrade/layout"
	"slipway.dev/slipway/upgrade/reboot"
)

// fleetBase and fleetSeq name each fleet's namespace (and so its nodes)
// apart from every other fleet of this process, parallel tests' too.
var (
	fleetBase = time.Now().UnixNano() % 1e9 / 1000 * 1000
	fleetSeq  atomic.Int64
)

// Fleet is a namespace with fake nodes, one in-process agent per node, each
// on its own system directory, and a stand-in for the kubelet that runs the
// upgrade Jobs: it swaps the node's `current` link (or fails the Job).
type Fleet struct {
	T    *testing.T
	NS   string // the fleet's namespace; its nodes are <NS>-n<i>
	Kube kubernetes.Interface
	Ops  versioned.Interface
	Root string // the nodes' directories (system directory, boot ID, lock)
	// Mu guards FailOn, RunJob, StageTime and StagingMost.
	Mu       sync.Mutex
	agents   map[string]*runningAgent
	programs Programs
	config   *rest.Config    // the administrator's
	locks    sync.Map        // node -> *sync.Mutex: one start or stop of a node at a time
	FailOn   map[string]bool // nodes whose upgrade Job fails
	// held: nodes whose slot Jobs (upgrade or activation) wait for the
	// test's word (HoldJobs): true runs the Job, false fails it.
	held map[string]chan bool
	// RunJob, when set, runs each Job that is not to fail in place of the
	// stand-in's own swap (a test that runs the Job's real command).
	RunJob func(j *batchv1.Job) bool
	// StageTime is how long a staging Job takes (others finish at once);
	// stagingNow and StagingMost count the staging Jobs running, now and at most.
	StageTime               time.Duration
	stagingNow, StagingMost int
	closed                  bool // set at cleanup: simulated reboots start no agent any more
	log                     *os.File
	// Configs are the agents' API configs by node (AsServiceAccount); none: the administrator's.
	Configs map[string]*rest.Config
	// ctrl is the fleet's controller, run as ctrlConfig (nil: the administrator).
	ctrl       *runningAgent
	ctrlConfig *rest.Config
}

// Programs start the fleet's programs in process: the package under test
// gives them (its own Run, and the other program's), so that this package
// imports neither.
type Programs struct {
	// Agent prepares a node's agent (when it is started) and returns what
	// runs it until ctx ends.
	Agent func(r AgentRun) func(ctx context.Context) error
	// Controller prepares a controller replica and returns what runs it
	// until ctx ends.
	Controller func(r ControllerRun) func(ctx context.Context) error
}

// AgentRun is what the fleet gives one node's agent.
type AgentRun struct {
	Node, Namespace, SystemDir, BootIDFile string
	Config                                 *rest.Config
	Rebooter                               reboot.Rebooter // a simulated reboot (SimReboot)
	Log                                    *slog.Logger
}

// ControllerRun is what the fleet gives a controller replica.
type ControllerRun struct {
	Identity, Namespace string
	Config              *rest.Config
	Log                 *slog.Logger
}

type runningAgent struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// New makes a fleet of nodes Ready nodes at v1 in a namespace of its own
// on env's control plane and starts its controller (p.Controller); each
// node's agent starts with Start.
func New(t *testing.T, env *testenv.Env, nodes int, p Programs) *Fleet {
	t.Helper()
	e := testenv.Need(t, env)
	f := &Fleet{T: t, agents: map[string]*runningAgent{}, FailOn: map[string]bool{}, programs: p, config: e.Config, Root: t.TempDir()}
	var err error
	if f.Kube, err = kubernetes.NewForConfig(e.Config); err != nil {
		t.Fatal(err)
	}
	if f.Ops, err = versioned.NewForConfig(e.Config); err != nil {
		t.Fatal(err)
	}
	f.NS = fmt.Sprintf("agent-%d", fleetBase+fleetSeq.Add(1)) // fleets of parallel tests share the control plane
	ctx := context.Background()
	if _, err := f.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.NS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// kube-controller-manager (not run by a fleet's control plane) gives
	// every namespace its ServiceAccount "default", which the API
	// server's ServiceAccount admission gives a pod that names none (a
	// slot's Pod); one that runs it may have made it first.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := f.Kube.CoreV1().ServiceAccounts(f.NS).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for i := range nodes {
		f.AddNode(fmt.Sprintf("%s-n%d", f.NS, i))
	}
	jctx, cancel := context.WithCancel(ctx)
	jobsDone, podsDone := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() {
		f.StopAll()
		f.StopController()
		cancel()
		<-jobsDone // a Job still running must not meet its node's directory removed
		<-podsDone
	})
	go func() { defer close(jobsDone); f.runJobs(jctx) }()
	go func() { defer close(podsDone); f.runSlotPods(jctx) }()
	f.StartController()
	return f
}

// AddNode creates a Ready node and its system directory at v1.
func (f *Fleet) AddNode(name string) {
	t := f.T
	ctx := context.Background()
	n, err := f.Kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{"fleet": f.NS}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		LastTransitionTime: metav1.Now(), LastHeartbeatTime: metav1.Now(), Reason: "KubeletReady"}}
	if _, err := f.Kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.Install(name, "v1")
	if err := os.WriteFile(f.BootFile(name), []byte("boot-0"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// SystemDir is node's system directory.
func (f *Fleet) SystemDir(node string) string { return filepath.Join(f.Root, node, "system") }
func (f *Fleet) BootFile(node string) string  { return filepath.Join(f.Root, node, "boot_id") }

// Install puts version into node's system directory and points current at it.
func (f *Fleet) Install(node, version string) {
	l := layout.New(f.SystemDir(node))
	for _, c := range []layout.Component{layout.Rootfs, layout.Kernel} {
		if err := os.MkdirAll(l.VersionDir(c, version), 0o755); err != nil {
			f.T.Error(err)
		}
		if old, err := l.Current(c); err == nil && old != version {
			_ = l.SetLink(c, layout.PreviousLink, old)
		}
		if err := l.SetLink(c, layout.CurrentLink, version); err != nil {
			f.T.Error(err)
		}
	}
}

// Current is what node's system directory's `current` names.
func (f *Fleet) Current(node string) string {
	v, err := layout.New(f.SystemDir(node)).Current(layout.Rootfs)
	if err != nil {
		f.T.Error(err)
	}
	return v
}

func (f *Fleet) lock(node string) func() {
	m, _ := f.locks.LoadOrStore(node, &sync.Mutex{})
	m.(*sync.Mutex).Lock()
	return m.(*sync.Mutex).Unlock
}

// Restart stops node's agent, runs between, and starts it again.
func (f *Fleet) Restart(node string, between func()) {
	defer f.lock(node)()
	f.stopLocked(node)
	if between != nil {
		between()
	}
	f.startLocked(node)
}

// Start runs node's agent in-process until stop or a simulated reboot.
func (f *Fleet) Start(node string) {
	defer f.lock(node)()
	f.stopLocked(node)
	f.startLocked(node)
}

func (f *Fleet) startLocked(node string) {
	ctx, cancel := context.WithCancel(context.Background())
	ra := &runningAgent{cancel: cancel, done: make(chan struct{})}
	f.Mu.Lock()
	if f.closed {
		f.Mu.Unlock()
		cancel()
		return
	}
	f.agents[node] = ra
	f.Mu.Unlock()
	cfg := f.config
	if c := f.Configs[node]; c != nil {
		cfg = c
	}
	r := AgentRun{Node: node, Namespace: f.NS, SystemDir: f.SystemDir(node), Config: cfg, BootIDFile: f.BootFile(node),
		Rebooter: &SimReboot{F: f, Node: node}, Log: slog.New(slog.NewTextHandler(f.LogFile(), &slog.HandlerOptions{Level: slog.LevelInfo}))}
	run := f.programs.Agent(r)
	go func() {
		defer close(ra.done)
		if err := run(ctx); err != nil && ctx.Err() == nil {
			f.T.Errorf("agent %s: %v", node, err)
		}
	}()
}

// Stop kills node's agent (as a crash or power-off would) and waits for it.
func (f *Fleet) Stop(node string) {
	defer f.lock(node)()
	f.stopLocked(node)
}

func (f *Fleet) stopLocked(node string) {
	f.Mu.Lock()
	ra := f.agents[node]
	delete(f.agents, node)
	f.Mu.Unlock()
	if ra != nil {
		ra.cancel()
		<-ra.done
	}
}

func (f *Fleet) StopAll() {
	f.Mu.Lock()
	f.closed = true
	var names []string
	for n := range f.agents {
		names = append(names, n)
	}
	f.Mu.Unlock()
	for _, n := range names {
		f.Stop(n)
	}
}

// LogFile is where every agent of the fleet logs; DumpLogs shows the lines
// of the nodes that matter when a test fails.
func (f *Fleet) LogFile() *os.File {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if f.log == nil {
		var err error
		if f.log, err = os.Create(filepath.Join(f.Root, "agents.log")); err != nil {
			f.T.Fatal(err)
		}
	}
	return f.log
}

func (f *Fleet) DumpLogs(nodes ...string) {
	b, _ := os.ReadFile(filepath.Join(f.Root, "agents.log"))
	for _, line := range strings.Split(string(b), "\n") {
		for _, n := range nodes {
			if strings.Contains(line, "node="+n+" ") {
				f.T.Log(line)
			}
		}
	}
}

// The fleet's controller: one in-process `slipway ops controller` for the
// fleet's namespace, started with the fleet, as the administrator or (after
// AsServiceAccount) as the manifest's controller ServiceAccount.

// StartController runs the controller until stopController or the test's end.
func (f *Fleet) StartController() { f.StartReplica("") }

// StartReplica runs the controller as replica id (its Lease identity)
// until stopController or the test's end.
func (f *Fleet) StartReplica(id string) {
	f.StopController()
	ctx, cancel := context.WithCancel(context.Background())
	ra := &runningAgent{cancel: cancel, done: make(chan struct{})}
	f.Mu.Lock()
	f.ctrl = ra
	cfg := f.ctrlConfig
	f.Mu.Unlock()
	if cfg == nil {
		cfg = f.config
	}
	r := ControllerRun{Identity: "controller-" + f.NS + id, Namespace: f.NS, Config: cfg,
		Log: slog.New(slog.NewTextHandler(f.LogFile(), &slog.HandlerOptions{Level: slog.LevelInfo}))}
	run := f.programs.Controller(r)
	go func() {
		defer close(ra.done)
		if err := run(ctx); err != nil && ctx.Err() == nil {
			f.T.Errorf("controller: %v", err)
		}
	}()
}

// StopController stops the controller (its Lease released) and waits for it.
func (f *Fleet) StopController() {
	f.Mu.Lock()
	ra := f.ctrl
	f.ctrl = nil
	f.Mu.Unlock()
	if ra != nil {
		ra.cancel()
		<-ra.done
	}
}

// ControllerAs restarts the controller with cfg's credentials.
func (f *Fleet) ControllerAs(cfg *rest.Config) {
	f.Mu.Lock()
	f.ctrlConfig = cfg
	f.Mu.Unlock()
	f.StartController()
}

// AgentsUp waits until every node named has its agent's heartbeat and its
// versions published: the controller, running before the agents, would
// otherwise skip a node whose agent is still starting (NoAgent), and a test
// of the order in which nodes take slots would see that instead.
func (f *Fleet) AgentsUp(nodes ...string) {
	f.T.Helper()
	deadline := time.Now().Add(time.Minute)
	for _, n := range nodes {
		for {
			l, lerr := f.Kube.CoordinationV1().Leases(f.NS).Get(context.Background(), protocol.AgentLeaseName(n), metav1.GetOptions{})
			node, nerr := f.Kube.CoreV1().Nodes().Get(context.Background(), n, metav1.GetOptions{})
			if lerr == nil && nerr == nil && l.Spec.RenewTime != nil && node.Labels[protocol.LabelRootfsVersion] != "" {
				break
			}
			if time.Now().After(deadline) {
				f.T.Fatalf("the agent of %s did not report within a minute (heartbeat: %v, node: %v)", n, lerr, nerr)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// Selector selects the fleet's nodes (a channel's nodeSelector).
func (f *Fleet) Selector() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS}}
}
