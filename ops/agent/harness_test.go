package agent

import (
	"context"
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

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/crds"
	"slipway.dev/slipway/ops/generated/clientset/versioned"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/upgrade"
	"slipway.dev/slipway/upgrade/layout"
)

var env *testenv.Env

// fleetBase and fleetSeq name each fleet's namespace (and so its nodes)
// apart from every other fleet of this process, parallel tests' too.
var (
	fleetBase = time.Now().UnixNano() % 1e9 / 1000 * 1000
	fleetSeq  atomic.Int64
)

func TestMain(m *testing.M) {
	os.Exit(testenv.RunMain(m, testenv.Options{CRDs: crds.Must()}, &env))
}

// fleet is a namespace with fake nodes, one in-process agent per node, each
// on its own system directory, and a stand-in for the kubelet that runs the
// upgrade Jobs: it swaps the node's `current` link (or fails the Job).
type fleet struct {
	t      *testing.T
	ns     string
	kube   kubernetes.Interface
	ops    versioned.Interface
	root   string
	mu     sync.Mutex
	agents map[string]*runningAgent
	locks  sync.Map        // node -> *sync.Mutex: one start or stop of a node at a time
	failOn map[string]bool // nodes whose upgrade Job fails
	// held: nodes whose slot Jobs (upgrade or activation) wait for the
	// test's word (holdJobs): true runs the Job, false fails it.
	held map[string]chan bool
	// stageTime is how long a staging Job takes (others finish at once);
	// stagingNow and stagingMost count the staging Jobs running, now and at most.
	stageTime               time.Duration
	stagingNow, stagingMost int
	closed                  bool // set at cleanup: simulated reboots start no agent any more
	log                     *os.File
	opts                    func(*Options)
	// configs are the agents' API configs by node (asServiceAccount); none: the administrator's.
	configs map[string]*rest.Config
	// ctrl is the fleet's controller, run as ctrlConfig (nil: the administrator).
	ctrl       *runningAgent
	ctrlConfig *rest.Config
}

type runningAgent struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func newFleet(t *testing.T, nodes int, edit func(*Options)) *fleet {
	t.Helper()
	e := testenv.Need(t, env)
	f := &fleet{t: t, agents: map[string]*runningAgent{}, failOn: map[string]bool{}, opts: edit, root: t.TempDir()}
	var err error
	if f.kube, err = kubernetes.NewForConfig(e.Config); err != nil {
		t.Fatal(err)
	}
	if f.ops, err = versioned.NewForConfig(e.Config); err != nil {
		t.Fatal(err)
	}
	f.ns = fmt.Sprintf("agent-%d", fleetBase+fleetSeq.Add(1)) // fleets of parallel tests share the control plane
	ctx := context.Background()
	if _, err := f.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range nodes {
		f.addNode(fmt.Sprintf("%s-n%d", f.ns, i))
	}
	jctx, cancel := context.WithCancel(ctx)
	jobsDone := make(chan struct{})
	t.Cleanup(func() {
		f.stopAll()
		f.stopController()
		cancel()
		<-jobsDone // a Job still running must not meet its node's directory removed
	})
	go func() { defer close(jobsDone); f.runJobs(jctx) }()
	f.startController()
	return f
}

// addNode creates a Ready node and its system directory at v1.
func (f *fleet) addNode(name string) {
	t := f.t
	ctx := context.Background()
	n, err := f.kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{"fleet": f.ns}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		LastTransitionTime: metav1.Now(), LastHeartbeatTime: metav1.Now(), Reason: "KubeletReady"}}
	if _, err := f.kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.install(name, "v1")
	if err := os.WriteFile(f.bootFile(name), []byte("boot-0"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

func (f *fleet) systemDir(node string) string { return filepath.Join(f.root, node, "system") }
func (f *fleet) bootFile(node string) string  { return filepath.Join(f.root, node, "boot_id") }

// install puts version into node's system directory and points current at it.
func (f *fleet) install(node, version string) {
	l := layout.New(f.systemDir(node))
	for _, c := range []layout.Component{layout.Rootfs, layout.Kernel} {
		if err := os.MkdirAll(l.VersionDir(c, version), 0o755); err != nil {
			f.t.Error(err)
		}
		if old, err := l.Current(c); err == nil && old != version {
			_ = l.SetLink(c, layout.PreviousLink, old)
		}
		if err := l.SetLink(c, layout.CurrentLink, version); err != nil {
			f.t.Error(err)
		}
	}
}

func (f *fleet) current(node string) string {
	v, err := layout.New(f.systemDir(node)).Current(layout.Rootfs)
	if err != nil {
		f.t.Error(err)
	}
	return v
}

func (f *fleet) lock(node string) func() {
	m, _ := f.locks.LoadOrStore(node, &sync.Mutex{})
	m.(*sync.Mutex).Lock()
	return m.(*sync.Mutex).Unlock
}

// restart stops node's agent, runs between, and starts it again.
func (f *fleet) restart(node string, between func()) {
	defer f.lock(node)()
	f.stopLocked(node)
	if between != nil {
		between()
	}
	f.startLocked(node)
}

// start runs node's agent in-process until stop or a simulated reboot.
func (f *fleet) start(node string) {
	defer f.lock(node)()
	f.stopLocked(node)
	f.startLocked(node)
}

func (f *fleet) startLocked(node string) {
	ctx, cancel := context.WithCancel(context.Background())
	ra := &runningAgent{cancel: cancel, done: make(chan struct{})}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		cancel()
		return
	}
	f.agents[node] = ra
	f.mu.Unlock()
	cfg := env.Config
	if c := f.configs[node]; c != nil {
		cfg = c
	}
	opts := Options{NodeName: node, Namespace: f.ns, SystemDir: f.systemDir(node), Config: cfg,
		Image: "slipway:test", BootIDFile: f.bootFile(node), Rebooter: &fakeReboot{f: f, node: node},
		LeaseDuration: 3 * time.Second, Resync: 5 * time.Second,
		Log: slog.New(slog.NewTextHandler(f.logFile(), &slog.HandlerOptions{Level: slog.LevelInfo}))}
	if f.opts != nil {
		f.opts(&opts)
	}
	go func() {
		defer close(ra.done)
		if err := Run(ctx, opts); err != nil && ctx.Err() == nil {
			f.t.Errorf("agent %s: %v", node, err)
		}
	}()
}

// stop kills node's agent (as a crash or power-off would) and waits for it.
func (f *fleet) stop(node string) {
	defer f.lock(node)()
	f.stopLocked(node)
}

func (f *fleet) stopLocked(node string) {
	f.mu.Lock()
	ra := f.agents[node]
	delete(f.agents, node)
	f.mu.Unlock()
	if ra != nil {
		ra.cancel()
		<-ra.done
	}
}

func (f *fleet) stopAll() {
	f.mu.Lock()
	f.closed = true
	var names []string
	for n := range f.agents {
		names = append(names, n)
	}
	f.mu.Unlock()
	for _, n := range names {
		f.stop(n)
	}
}

// fakeReboot stops the agent, changes the boot ID and starts it again.
type fakeReboot struct {
	f    *fleet
	node string
}

func (r *fakeReboot) String() string { return "simulated reboot" }

func (r *fakeReboot) Reboot(context.Context) error {
	go r.f.restart(r.node, func() {
		_ = os.WriteFile(r.f.bootFile(r.node), []byte(fmt.Sprintf("boot-%d", time.Now().UnixNano())), 0o644)
	})
	return nil
}

// runJobs plays the kubelet for upgrade Jobs: it swaps the node's system
// directory to the Job's version and marks the Job complete, or fails it.
func (f *fleet) runJobs(ctx context.Context) {
	w, err := f.kube.BatchV1().Jobs(f.ns).Watch(ctx, metav1.ListOptions{})
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
		f.mu.Lock()
		fail, wait := f.failOn[j.Annotations[protocol.AnnotationJobNode]], f.stageTime
		f.mu.Unlock()
		if gate := f.gateOf(j); gate != nil {
			staging.Add(1)
			go func() {
				defer staging.Done()
				select {
				case <-ctx.Done():
				case ok := <-gate:
					finishJob(ctx, f.kube, j, !ok || !f.runJob(j, fail))
				}
			}()
			continue
		}
		if argAfter(j.Spec.Template.Spec.Containers[0].Args, "--phase") == "stage" && wait > 0 {
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
					finishJob(ctx, f.kube, j, !ok)
				}
			}()
			continue
		}
		finishJob(ctx, f.kube, j, !f.runJob(j, fail))
	}
}

// holdJobs holds node's slot Jobs (not staging, pruning or rollback Jobs)
// until the returned function is called: true runs the Job, false fails it.
func (f *fleet) holdJobs(node string) func(ok bool) {
	gate := make(chan bool, 1)
	f.mu.Lock()
	if f.held == nil {
		f.held = map[string]chan bool{}
	}
	f.held[node] = gate
	f.mu.Unlock()
	return func(ok bool) { gate <- ok }
}

// gateOf is the gate j waits at: a slot Job of a held node.
func (f *fleet) gateOf(j *batchv1.Job) chan bool {
	if j.Annotations[protocol.AnnotationJobAction] != "" {
		return nil // staging, pruning, rollback
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held[j.Annotations[protocol.AnnotationJobNode]]
}

func (f *fleet) countStaging(d int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stagingNow += d
	f.stagingMost = max(f.stagingMost, f.stagingNow)
}

// runJob does what Job j's command does to its node's system directory
// and reports whether it succeeded.
func (f *fleet) runJob(j *batchv1.Job, fail bool) bool {
	node := j.Annotations[protocol.AnnotationJobNode]
	args := j.Spec.Template.Spec.Containers[0].Args
	version := argAfter(args, "--version")
	switch {
	case fail:
		return false
	case args[1] == "rollback":
		return f.runRollback(node, args)
	case args[1] == "prune":
		_, err := upgrade.Prune(context.Background(), upgrade.PruneOptions{SystemDir: f.systemDir(node),
			LockFile: filepath.Join(f.root, node, "lock"), Keep: []string{argAfter(args, "--keep")}})
		return err == nil
	case argAfter(args, "--phase") == "stage":
		f.stage(node, version)
	case argAfter(args, "--phase") == "activate":
		staged, _ := upgrade.Prestaged(f.systemDir(node))
		if !slices.Contains(staged, version) {
			return false // as `ops upgrade --phase activate` refuses what is not staged
		}
		f.install(node, version)
	default:
		f.install(node, version)
	}
	return true
}

// stage puts version into node's system directory, complete (with the
// marker `ops upgrade --phase stage` writes), moving no link.
func (f *fleet) stage(node, version string) {
	l := layout.New(f.systemDir(node))
	for _, c := range []layout.Component{layout.Rootfs, layout.Kernel} {
		dir := l.VersionDir(c, version)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			f.t.Error(err)
		}
		if err := os.WriteFile(filepath.Join(dir, upgrade.MarkerFile), []byte(`{"release":"`+version+`"}`), 0o644); err != nil {
			f.t.Error(err)
		}
	}
}

func argAfter(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
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

// channel creates the fleet's UpdateChannel.
func (f *fleet) channel(spec v1.UpdateChannelSpec) {
	f.t.Helper()
	ch := &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: f.ns}, Spec: spec}
	if _, err := f.ops.OpsV1().UpdateChannels(f.ns).Create(context.Background(), ch, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fleet) get() *v1.UpdateChannel {
	ch, err := f.ops.OpsV1().UpdateChannels(f.ns).Get(context.Background(), "default", metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return ch
}

// waitFor watches the channel until cond holds or timeout passes.
func (f *fleet) waitFor(what string, timeout time.Duration, cond func(*v1.UpdateChannel) bool) *v1.UpdateChannel {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		ch := f.get()
		if cond(ch) {
			return ch
		}
		w, err := f.ops.OpsV1().UpdateChannels(f.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: ch.ResourceVersion,
			FieldSelector: "metadata.name=default"})
		if err != nil {
			f.t.Fatalf("waiting for %s: %v; status: %+v", what, err, ch.Status)
		}
		select {
		case <-w.ResultChan():
		case <-ctx.Done():
			w.Stop()
			var holders []string
			for _, s := range ch.Status.Updating {
				holders = append(holders, s.Node)
			}
			f.dumpLogs(holders...)
			f.t.Fatalf("timed out waiting for %s; status: %+v", what, f.get().Status)
		}
		w.Stop()
	}
}

// logFile is where every agent of the fleet logs; dumpLogs shows the lines
// of the nodes that matter when a test fails.
// holds fails the test when cond stops holding at any change of the channel
// within window: the way to see that something does NOT happen.
func (f *fleet) holds(what string, window time.Duration, cond func(*v1.UpdateChannel) bool) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	for ctx.Err() == nil {
		ch := f.get()
		if !cond(ch) {
			f.t.Fatalf("%s: broken; status: %+v", what, ch.Status)
		}
		w, err := f.ops.OpsV1().UpdateChannels(f.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: ch.ResourceVersion,
			FieldSelector: "metadata.name=default"})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			f.t.Fatalf("watching that %s: %v", what, err)
		}
		for ev := range w.ResultChan() {
			if c, ok := ev.Object.(*v1.UpdateChannel); ok && !cond(c) {
				w.Stop()
				f.t.Fatalf("%s: broken; status: %+v", what, c.Status)
			}
		}
		w.Stop() // closed by the window's end, or by the server: watch again
	}
}

func (f *fleet) logFile() *os.File {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.log == nil {
		var err error
		if f.log, err = os.Create(filepath.Join(f.root, "agents.log")); err != nil {
			f.t.Fatal(err)
		}
	}
	return f.log
}

func (f *fleet) dumpLogs(nodes ...string) {
	b, _ := os.ReadFile(filepath.Join(f.root, "agents.log"))
	for _, line := range strings.Split(string(b), "\n") {
		for _, n := range nodes {
			if strings.Contains(line, "node="+n+" ") {
				f.t.Log(line)
			}
		}
	}
}
