// Package fleettest is the test harness of the node agent (ops/agent) and
// the controller (ops/controller): a namespace on a real API server
// (ops/testenv) with fake nodes, one in-process agent per node on a system
// directory of its own, a controller, and a stand-in for the kubelet that
// runs the upgrade Jobs. Both packages' tests start both programs through
// it; it imports neither (Programs).
package fleettest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/generated/clientset/versioned"
	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/upgrade"
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
	// Mu guards FailOn, StageTime and StagingMost.
	Mu       sync.Mutex
	agents   map[string]*runningAgent
	programs Programs
	config   *rest.Config    // the administrator's
	locks    sync.Map        // node -> *sync.Mutex: one start or stop of a node at a time
	FailOn   map[string]bool // nodes whose upgrade Job fails
	// held: nodes whose slot Jobs (upgrade or activation) wait for the
	// test's word (HoldJobs): true runs the Job, false fails it.
	held map[string]chan bool
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
	for i := range nodes {
		f.AddNode(fmt.Sprintf("%s-n%d", f.NS, i))
	}
	jctx, cancel := context.WithCancel(ctx)
	jobsDone := make(chan struct{})
	t.Cleanup(func() {
		f.StopAll()
		f.StopController()
		cancel()
		<-jobsDone // a Job still running must not meet its node's directory removed
	})
	go func() { defer close(jobsDone); f.runJobs(jctx) }()
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

// SimReboot stops the agent, changes the boot ID and starts it again.
type SimReboot struct {
	F    *Fleet
	Node string
}

func (r *SimReboot) String() string { return "simulated reboot" }

func (r *SimReboot) Reboot(context.Context) error {
	go r.F.Restart(r.Node, func() {
		_ = os.WriteFile(r.F.BootFile(r.Node), []byte(fmt.Sprintf("boot-%d", time.Now().UnixNano())), 0o644)
	})
	return nil
}

// runJobs plays the kubelet for upgrade Jobs: it swaps the node's system
// directory to the Job's version and marks the Job complete, or fails it.
func (f *Fleet) runJobs(ctx context.Context) {
	w, err := f.Kube.BatchV1().Jobs(f.NS).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	defer w.Stop()
	var staging sync.WaitGroup
	defer staging.Wait()
	for ev := range w.ResultChan() {
		j, ok := ev.Object.(*batchv1.Job)
		if !ok || ev.Type != watch.Added {
			continue
		}
		f.Mu.Lock()
		fail, wait := f.FailOn[j.Annotations[protocol.AnnotationJobNode]], f.StageTime
		f.Mu.Unlock()
		if gate := f.gateOf(j); gate != nil {
			staging.Add(1)
			go func() {
				defer staging.Done()
				select {
				case <-ctx.Done():
				case ok := <-gate:
					finishJob(ctx, f.Kube, j, !ok || !f.runJob(j, fail))
				}
			}()
			continue
		}
		if protocol.ArgAfterFlag(j.Spec.Template.Spec.Containers[0].Args, "--phase") == "stage" && wait > 0 {
			staging.Add(1)
			f.countStaging(+1)
			go func() {
				defer staging.Done()
				select {
				case <-ctx.Done():
					f.countStaging(-1)
				case <-time.After(wait):
					ok := f.runJob(j, fail)
					// Uncounted before its end is written: a Job that
					// starts once this one is seen over is not counted
					// beside it, however late this goroutine runs on.
					f.countStaging(-1)
					finishJob(ctx, f.Kube, j, !ok)
				}
			}()
			continue
		}
		finishJob(ctx, f.Kube, j, !f.runJob(j, fail))
	}
}

// HoldJobs holds node's slot Jobs (not staging, pruning or rollback Jobs)
// until the returned function is called: true runs the Job, false fails it.
func (f *Fleet) HoldJobs(node string) func(ok bool) {
	gate := make(chan bool, 1)
	f.Mu.Lock()
	if f.held == nil {
		f.held = map[string]chan bool{}
	}
	f.held[node] = gate
	f.Mu.Unlock()
	return func(ok bool) { gate <- ok }
}

// gateOf is the gate j waits at: a slot Job of a held node.
func (f *Fleet) gateOf(j *batchv1.Job) chan bool {
	if j.Annotations[protocol.AnnotationJobAction] != "" {
		return nil // staging, pruning, rollback
	}
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return f.held[j.Annotations[protocol.AnnotationJobNode]]
}

func (f *Fleet) countStaging(d int) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.stagingNow += d
	f.StagingMost = max(f.StagingMost, f.stagingNow)
}

// runJob does what Job j's command does to its node's system directory
// and reports whether it succeeded.
func (f *Fleet) runJob(j *batchv1.Job, fail bool) bool {
	node := j.Annotations[protocol.AnnotationJobNode]
	args := j.Spec.Template.Spec.Containers[0].Args
	version := protocol.ArgAfterFlag(args, "--version")
	switch {
	case fail:
		return false
	case args[1] == "rollback":
		return f.RunRollback(node, args)
	case args[1] == "prune":
		_, err := upgrade.Prune(context.Background(), upgrade.PruneOptions{SystemDir: f.SystemDir(node),
			LockFile: filepath.Join(f.Root, node, "lock"), Keep: []string{protocol.ArgAfterFlag(args, "--keep")}})
		return err == nil
	case protocol.ArgAfterFlag(args, "--phase") == "stage":
		f.Stage(node, version)
	case protocol.ArgAfterFlag(args, "--phase") == "activate":
		staged, _ := upgrade.Prestaged(f.SystemDir(node))
		if !slices.Contains(staged, version) {
			return false // as `ops upgrade --phase activate` refuses what is not staged
		}
		f.Install(node, version)
	default:
		f.Install(node, version)
	}
	return true
}

// Stage puts version into node's system directory, complete (with the
// marker `ops upgrade --phase stage` writes), moving no link.
func (f *Fleet) Stage(node, version string) {
	l := layout.New(f.SystemDir(node))
	for _, c := range []layout.Component{layout.Rootfs, layout.Kernel} {
		dir := l.VersionDir(c, version)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			f.T.Error(err)
		}
		if err := os.WriteFile(filepath.Join(dir, upgrade.MarkerFile), []byte(`{"release":"`+version+`"}`), 0o644); err != nil {
			f.T.Error(err)
		}
	}
}

func finishJob(ctx context.Context, c kubernetes.Interface, j *batchv1.Job, fail bool) {
	now := metav1.Now()
	j.Status.StartTime = &now
	if fail {
		j.Status.Failed = 1
		j.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "sha256 mismatch", LastTransitionTime: now},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "sha256 mismatch", LastTransitionTime: now},
		}
	} else {
		j.Status.Succeeded = 1
		j.Status.CompletionTime = &now
		j.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
	}
	if _, err := c.BatchV1().Jobs(j.Namespace).UpdateStatus(ctx, j, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "finish job %s: %v\n", j.Name, err)
	}
}

// Channel creates the fleet's UpdateChannel.
func (f *Fleet) Channel(spec v1.UpdateChannelSpec) {
	f.T.Helper()
	ch := &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: f.NS}, Spec: spec}
	if _, err := f.Ops.OpsV1().UpdateChannels(f.NS).Create(context.Background(), ch, metav1.CreateOptions{}); err != nil {
		f.T.Fatal(err)
	}
}

func (f *Fleet) Get() *v1.UpdateChannel {
	ch, err := f.Ops.OpsV1().UpdateChannels(f.NS).Get(context.Background(), "default", metav1.GetOptions{})
	if err != nil {
		f.T.Fatal(err)
	}
	return ch
}

// WaitFor watches the channel until cond holds or timeout passes.
func (f *Fleet) WaitFor(what string, timeout time.Duration, cond func(*v1.UpdateChannel) bool) *v1.UpdateChannel {
	f.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		ch := f.Get()
		if cond(ch) {
			return ch
		}
		w, err := f.Ops.OpsV1().UpdateChannels(f.NS).Watch(ctx, metav1.ListOptions{ResourceVersion: ch.ResourceVersion,
			FieldSelector: "metadata.name=default"})
		if err != nil {
			f.T.Fatalf("waiting for %s: %v; status: %+v", what, err, ch.Status)
		}
		select {
		case <-w.ResultChan():
		case <-ctx.Done():
			w.Stop()
			var holders []string
			for _, s := range ch.Status.Updating {
				holders = append(holders, s.Node)
			}
			f.DumpLogs(holders...)
			f.T.Fatalf("timed out waiting for %s; status: %+v", what, f.Get().Status)
		}
		w.Stop()
	}
}

// LogFile is where every agent of the fleet logs; dumpLogs shows the lines
// of the nodes that matter when a test fails.
// Holds fails the test when cond stops holding at any change of the channel
// within window: the way to see that something does NOT happen.
func (f *Fleet) Holds(what string, window time.Duration, cond func(*v1.UpdateChannel) bool) {
	f.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	for ctx.Err() == nil {
		ch := f.Get()
		if !cond(ch) {
			f.T.Fatalf("%s: broken; status: %+v", what, ch.Status)
		}
		w, err := f.Ops.OpsV1().UpdateChannels(f.NS).Watch(ctx, metav1.ListOptions{ResourceVersion: ch.ResourceVersion,
			FieldSelector: "metadata.name=default"})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			f.T.Fatalf("watching that %s: %v", what, err)
		}
		for ev := range w.ResultChan() {
			if c, ok := ev.Object.(*v1.UpdateChannel); ok && !cond(c) {
				w.Stop()
				f.T.Fatalf("%s: broken; status: %+v", what, c.Status)
			}
		}
		w.Stop() // closed by the window's end, or by the server: watch again
	}
}

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
			if lerr == nil && nerr == nil && l.Spec.RenewTime != nil && node.Annotations[protocol.AnnotationRootfsVersion] != "" {
				break
			}
			if time.Now().After(deadline) {
				f.T.Fatalf("the agent of %s did not report within a minute (heartbeat: %v, node: %v)", n, lerr, nerr)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func ZeroDelay() *metav1.Duration { return &metav1.Duration{} }

func IsTrue(ch *v1.UpdateChannel, t string) bool {
	return meta.IsStatusConditionTrue(ch.Status.Conditions, t)
}

func Done(n int) func(*v1.UpdateChannel) bool {
	return func(ch *v1.UpdateChannel) bool {
		return ch.Status.Counts.UpToDate == n && ch.Status.Counts.Nodes == n && len(ch.Status.Updating) == 0 && IsTrue(ch, v1.ConditionComplete)
	}
}

// Watcher records, from watches, the most slots held and nodes cordoned at any instant.
type Watcher struct {
	mu          sync.Mutex
	maxSlots    int
	maxCordoned int
	cordoned    map[string]bool
	bad         []string
}

func (f *Fleet) Watch(ctx context.Context) *Watcher {
	w := &Watcher{cordoned: map[string]bool{}}
	cw, err := f.Ops.OpsV1().UpdateChannels(f.NS).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		f.T.Fatal(err)
	}
	nw, err := f.Kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: "fleet=" + f.NS})
	if err != nil {
		f.T.Fatal(err)
	}
	go func() {
		for ev := range cw.ResultChan() {
			ch, ok := ev.Object.(*v1.UpdateChannel)
			if !ok {
				continue
			}
			w.mu.Lock()
			w.maxSlots = max(w.maxSlots, len(ch.Status.Updating))
			seen := map[string]bool{}
			for _, s := range ch.Status.Updating {
				if seen[s.Node] || !strings.HasPrefix(s.Node, f.NS+"-n") {
					w.bad = append(w.bad, fmt.Sprintf("bad slot list %+v", ch.Status.Updating))
				}
				seen[s.Node] = true
			}
			w.mu.Unlock()
		}
	}()
	go func() {
		for ev := range nw.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			w.mu.Lock()
			w.cordoned[n.Name] = n.Spec.Unschedulable && ev.Type != watch.Deleted
			c := 0
			for _, on := range w.cordoned {
				if on {
					c++
				}
			}
			w.maxCordoned = max(w.maxCordoned, c)
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *Watcher) Check(t *testing.T, concurrency int) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("most slots held at once: %d, most nodes cordoned at once: %d (concurrency %d)", w.maxSlots, w.maxCordoned, concurrency)
	if w.maxSlots > concurrency || w.maxCordoned > concurrency {
		t.Errorf("over concurrency: %d slots, %d cordoned, concurrency %d", w.maxSlots, w.maxCordoned, concurrency)
	}
	if w.maxSlots == 0 {
		t.Error("the watch never saw a slot: the test did not observe the rollout")
	}
	for _, b := range w.bad {
		t.Error(b)
	}
}

func (f *Fleet) AssertAllAt(version string) {
	f.T.Helper()
	nodes, err := f.Kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: "fleet=" + f.NS})
	if err != nil {
		f.T.Fatal(err)
	}
	for _, n := range nodes.Items {
		if got := f.Current(n.Name); got != version {
			f.T.Errorf("node %s: current is %s, want %s", n.Name, got, version)
		}
		if n.Spec.Unschedulable || n.Annotations[drain.AnnotationCordonedBy] != "" {
			f.T.Errorf("node %s left cordoned", n.Name)
		}
		if n.Labels[protocol.LabelRootfsVersion] != version {
			f.T.Errorf("node %s: label %s=%q, want %s", n.Name, protocol.LabelRootfsVersion, n.Labels[protocol.LabelRootfsVersion], version)
		}
	}
}

// Events waits (watching, up to 30 s) until at least want events of reason
// were recorded, and returns how many there are.
func (f *Fleet) Events(reason string, want int) int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := metav1.ListOptions{FieldSelector: "reason=" + reason}
	for {
		l, err := f.Kube.CoreV1().Events(f.NS).List(ctx, opts)
		if err != nil {
			return 0
		}
		n := 0
		for _, e := range l.Items {
			n += int(max(e.Count, 1))
		}
		if n >= want {
			return n
		}
		opts.ResourceVersion = l.ResourceVersion
		w, err := f.Kube.CoreV1().Events(f.NS).Watch(ctx, opts)
		if err != nil {
			return n
		}
		select {
		case <-w.ResultChan():
		case <-ctx.Done():
		}
		w.Stop()
		if ctx.Err() != nil {
			return n
		}
		opts.ResourceVersion = ""
	}
}

func (f *Fleet) PatchNodeAnnotation(node, k, v string) error {
	data := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, k, v)
	_, err := f.Kube.CoreV1().Nodes().Patch(context.Background(), node, "application/merge-patch+json", []byte(data), metav1.PatchOptions{})
	return err
}

func (f *Fleet) Patch(mergePatch string) {
	f.T.Helper()
	_, err := f.Ops.OpsV1().UpdateChannels(f.NS).Patch(context.Background(), "default", "application/merge-patch+json", []byte(mergePatch), metav1.PatchOptions{})
	if err != nil {
		f.T.Fatalf("patch the channel with %s: %v", mergePatch, err)
	}
}

// Heartbeat writes node's agent heartbeat as if its agent just reported.
func (f *Fleet) Heartbeat(node string) {
	f.T.Helper()
	now, secs := metav1.NewMicroTime(time.Now()), int32(180)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: protocol.AgentLeaseName(node), Namespace: f.NS},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &node, LeaseDurationSeconds: &secs, RenewTime: &now}}
	if _, err := f.Kube.CoordinationV1().Leases(f.NS).Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
		f.T.Fatal(err)
	}
}

// SetReady sets node's Ready condition.
func (f *Fleet) SetReady(node string, ready bool) {
	f.T.Helper()
	ctx := context.Background()
	n, err := f.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		f.T.Fatal(err)
	}
	status, reason := corev1.ConditionTrue, "KubeletReady"
	if !ready {
		status, reason = corev1.ConditionUnknown, "NodeStatusUnknown"
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: reason,
		LastTransitionTime: metav1.Now(), LastHeartbeatTime: metav1.Now()}}
	if _, err := f.Kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		f.T.Fatal(err)
	}
}

func (f *Fleet) Node(name string) *corev1.Node {
	f.T.Helper()
	n, err := f.Kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.T.Fatal(err)
	}
	return n
}

func (f *Fleet) PatchNodeLabel(node, k, v string) error {
	_, err := f.Kube.CoreV1().Nodes().Patch(context.Background(), node, "application/merge-patch+json",
		[]byte(`{"metadata":{"labels":{"`+k+`":"`+v+`"}}}`), metav1.PatchOptions{})
	return err
}

// JobsByAction lists the fleet's Jobs: slot upgrade Jobs, staging Jobs and
// pruning Jobs, each by node.
func (f *Fleet) JobsByAction() (slots, stages, prunes map[string][]batchv1.Job) {
	f.T.Helper()
	list, err := f.Kube.BatchV1().Jobs(f.NS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		f.T.Fatal(err)
	}
	slots, stages, prunes = map[string][]batchv1.Job{}, map[string][]batchv1.Job{}, map[string][]batchv1.Job{}
	for _, j := range list.Items {
		node := j.Annotations[protocol.AnnotationJobNode]
		switch j.Annotations[protocol.AnnotationJobAction] {
		case protocol.JobActionStage:
			stages[node] = append(stages[node], j)
		case protocol.JobActionPrune:
			prunes[node] = append(prunes[node], j)
		case "":
			slots[node] = append(slots[node], j)
		}
	}
	return slots, stages, prunes
}

// BlockEviction puts on node a pod owned by a controller and a
// PodDisruptionBudget that never allows its eviction.
func (f *Fleet) BlockEviction(t *testing.T, node string) {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: f.NS}}
	if _, err := f.Kube.CoreV1().ServiceAccounts(f.NS).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err) // no controller-manager creates it here
	}
	yes := true
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: f.NS, Labels: map[string]string{"app": "guarded"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "guarded", UID: "0d1e7c5e-0000-4000-8000-000000000001", Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/fake"}}}}
	p, err := f.Kube.CoreV1().Pods(f.NS).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	if _, err := f.Kube.CoreV1().Pods(f.NS).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: f.NS},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}}}}
	if _, err := f.Kube.PolicyV1().PodDisruptionBudgets(f.NS).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No disruption controller runs here: the budget's status stays
	// unprocessed, and the Eviction API refuses (429) every eviction, once
	// it sees the budget: wait for that, so that no drain comes first. The
	// probe asks once per call: client-go would retry a 429 after its
	// Retry-After (10 s) up to 10 times, 100 s before it answers.
	dry := &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := f.Kube.CoreV1().RESTClient().Post().Namespace(f.NS).Resource("pods").Name("guarded").SubResource("eviction").MaxRetries(0).
			Body(&policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: f.NS}, DeleteOptions: dry}).Do(ctx).Error()
		if apierrors.IsTooManyRequests(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Eviction API does not refuse the guarded pod's eviction: %v", err)
		}
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = f.Kube.CoreV1().Pods(f.NS).Delete(context.Background(), "guarded", metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
}

// WaitNode polls node every 100 ms, up to 30 s, until cond holds.
func (f *Fleet) WaitNode(t *testing.T, node, what string, cond func(*corev1.Node) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := f.Kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err == nil && cond(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s not %s within 30s (last read: %v, labels %v)", node, what, err, n.GetLabels())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// EventsWithin is events with a shorter wait.
func (f *Fleet) EventsWithin(reason string, want int, wait time.Duration) int {
	deadline := time.Now().Add(wait)
	n := 0
	for time.Now().Before(deadline) {
		l, err := f.Kube.CoreV1().Events(f.NS).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=" + reason})
		if err != nil {
			f.T.Fatal(err)
		}
		n = 0
		for _, e := range l.Items {
			n += int(max(e.Count, 1))
		}
		if n >= want {
			return n
		}
		time.Sleep(200 * time.Millisecond)
	}
	return n
}

// failRollbacks: node -> how many of its rollback Jobs still fail.
var FailRollbacks sync.Map

// RunRollback runs a rollback Job's command on node's system directory:
// the real `ops rollback` of the components the Job names, or a failure.
func (f *Fleet) RunRollback(node string, args []string) bool {
	if n, ok := FailRollbacks.Load(node); ok && n.(int) > 0 {
		FailRollbacks.Store(node, n.(int)-1)
		return false
	}
	var comps []layout.Component
	for _, c := range layout.Components {
		if slices.Contains(args, "--"+protocol.ComponentFlag[c]+"=true") {
			comps = append(comps, c)
		}
	}
	if len(comps) == 0 {
		f.T.Errorf("rollback Job of %s names no component: %v", node, args)
		return false
	}
	from := map[layout.Component]string{}
	for i, a := range args {
		if a == "--from" && i+1 < len(args) {
			name, v, _ := strings.Cut(args[i+1], "=")
			for c, flag := range protocol.ComponentFlag {
				if flag == name {
					from[c] = v
				}
			}
		}
	}
	_, err := upgrade.Rollback(context.Background(), upgrade.RollbackOptions{SystemDir: f.SystemDir(node), Components: comps,
		LockFile: filepath.Join(f.Root, node, "lock"), From: from})
	if err != nil {
		f.T.Errorf("rollback of %s: %v", node, err)
	}
	return err == nil
}

// AsServiceAccount makes the fleet's agents run as the manifest's
// ServiceAccount, each with the bound token of a pod on its own node
// (testenv.PodToken), and its controller as the controller's, under the manifest's RBAC and admission policies
// rendered with mo for the fleet's namespace: a call the shipped manifest
// does not allow fails the test's rollout as it would a real one's.
func (f *Fleet) AsServiceAccount(mo manifest.Options) {
	t := f.T
	t.Helper()
	mo.Namespace = f.NS
	if mo.Image == "" {
		mo.Image = "slipway:test"
	}
	ctx := context.Background()
	for _, obj := range manifest.AccessObjects(mo) {
		if err := f.create(ctx, obj); err != nil {
			t.Fatalf("create %T: %v", obj, err)
		}
	}
	nodes, err := f.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "fleet=" + f.NS})
	if err != nil {
		t.Fatal(err)
	}
	f.Configs = map[string]*rest.Config{}
	for _, n := range nodes.Items {
		yes := true // the DaemonSet's pod, as the drain sees it (and leaves alone)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-" + n.Name, Namespace: f.NS, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "DaemonSet", Name: manifest.AgentName, UID: "0d1e7c5e-0000-4000-8000-0000000000da", Controller: &yes}}},
			Spec: corev1.PodSpec{ServiceAccountName: manifest.AgentName, NodeName: n.Name, Containers: []corev1.Container{{Name: "agent", Image: mo.Image}}}}
		if _, err := f.Kube.CoreV1().Pods(f.NS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cfg, err := testenv.PodToken(ctx, f.config, f.NS, pod.Name)
		if err != nil {
			t.Fatal(err)
		}
		f.Configs[n.Name] = cfg
	}
	if len(nodes.Items) > 0 {
		policiesInForce(t, f.Configs[nodes.Items[0].Name], f.NS, nodes.Items[0].Name)
	}
	// The controller's pod, on no fleet node (a drain would evict it).
	ctrl := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: manifest.ControllerName, Namespace: f.NS},
		Spec: corev1.PodSpec{ServiceAccountName: manifest.ControllerName, Containers: []corev1.Container{{Name: "controller", Image: mo.Image}}}}
	if _, err := f.Kube.CoreV1().Pods(f.NS).Create(ctx, ctrl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := testenv.PodToken(ctx, f.config, f.NS, ctrl.Name)
	if err != nil {
		t.Fatal(err)
	}
	f.ControllerAs(cfg)
}

// create creates one of the manifest's access objects (the namespace exists);
// cluster-scoped ones are removed at the test's end.
func (f *Fleet) create(ctx context.Context, obj any) error {
	c, o := f.Kube, metav1.CreateOptions{}
	var err error
	var cleanup func() error
	bg := context.Background()
	switch v := obj.(type) {
	case *corev1.Namespace:
		return nil
	case *corev1.ServiceAccount:
		_, err = c.CoreV1().ServiceAccounts(v.Namespace).Create(ctx, v, o)
	case *rbacv1.Role:
		_, err = c.RbacV1().Roles(v.Namespace).Create(ctx, v, o)
	case *rbacv1.RoleBinding:
		_, err = c.RbacV1().RoleBindings(v.Namespace).Create(ctx, v, o)
	case *rbacv1.ClusterRole:
		_, err = c.RbacV1().ClusterRoles().Create(ctx, v, o)
		cleanup = func() error { return c.RbacV1().ClusterRoles().Delete(bg, v.Name, metav1.DeleteOptions{}) }
	case *rbacv1.ClusterRoleBinding:
		_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, v, o)
		cleanup = func() error { return c.RbacV1().ClusterRoleBindings().Delete(bg, v.Name, metav1.DeleteOptions{}) }
	case *admissionv1.ValidatingAdmissionPolicy:
		_, err = c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, v, o)
		cleanup = func() error {
			return c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(bg, v.Name, metav1.DeleteOptions{})
		}
	case *admissionv1.ValidatingAdmissionPolicyBinding:
		_, err = c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, v, o)
		cleanup = func() error {
			return c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(bg, v.Name, metav1.DeleteOptions{})
		}
	default:
		return fmt.Errorf("no client for %T", obj)
	}
	if err == nil && cleanup != nil {
		f.T.Cleanup(func() { _ = cleanup() })
	}
	return err
}

// ShowViews writes on each of the fleet's nodes its view of ch, as the
// controller does after it writes ch's status: for tests whose controller
// is stopped, so that the test alone decides the slots.
func (f *Fleet) ShowViews(t *testing.T, ch *v1.UpdateChannel) {
	t.Helper()
	ctx := context.Background()
	nodes, err := f.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "fleet=" + f.NS})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		var val any
		if v, ok := plan.ViewOf(ch, n.Name, true); ok {
			val = v.String()
		}
		data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{protocol.ViewKey(ch.UID): val}}})
		if _, err := f.Kube.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// policiesInForce waits until the API server enforces the admission
// policies just created: it loads them a moment after their creation
// (longer on a loaded machine), and a call admitted before that would pass
// for one the shipped manifest allows. The probe is a Job of a shape the
// Job policy refuses (another image, no command), created as an agent in
// dry run.
func policiesInForce(t *testing.T, agent *rest.Config, ns, node string) {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(agent)
	probe := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "policy-probe", Namespace: ns},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "probe", Image: "registry.invalid/not-slipway"}}}}}}
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := cs.BatchV1().Jobs(ns).Create(context.Background(), probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Job admission policy is not enforced a minute after its creation (probe: %v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Selector selects the fleet's nodes (a channel's nodeSelector).
func (f *Fleet) Selector() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS}}
}
