package updateoperator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/updateoperator/platform"
	"slipway.dev/slipway/ops/updateoperator/platform/brapitest"
	"slipway.dev/slipway/upgrade"
	"slipway.dev/slipway/upgrade/channel"
	"slipway.dev/slipway/upgrade/releasetest"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.RunMain(m, testenv.Options{Cluster: true, Nodes: 2, NodePrefix: "base-"}, &env))
}

// fleet is fake nodes of the simulated cluster, each with an in-process
// agent: the even ones on the slipway platform (a real system directory
// upgraded from a mirror), the odd ones on a Bottlerocket API emulator (its
// own unix socket, 423s included). A reboot stops the node's agent, takes
// the node NotReady, brings it back with a new boot ID and starts the agent
// again.
type fleet struct {
	t       *testing.T
	env     *testenv.Env
	kube    *kube.Clientset
	prefix  string
	keys    Keys
	nodes   []string
	mirror  string
	src     channel.Source
	dir     string
	log     *slog.Logger
	mu      sync.Mutex
	agents  map[string]*run
	plats   map[string]platform.Platform
	br      map[string]*brapitest.Server
	reboots map[string]int
	down    map[string]bool // a simulated reboot is under way
	// stayDown: the node's next reboot leaves it NotReady (its agent runs).
	stayDown map[string]bool
	// staleStatusBootID: a reboot changes the host's boot ID only, not
	// the Node's status (a kubelet that has not written it yet).
	staleStatusBootID bool
	boots             map[string]string // each host's boot ID, as its kernel says it
	// stepTimeout is the agents' --step-timeout (0: the default).
	stepTimeout time.Duration
	// agentWrap, when set, wraps the agents' transport (to count their calls).
	agentWrap func(http.RoundTripper) http.RoundTripper
	// agentEdit, when set, edits each agent's options as it starts.
	agentEdit func(node string, o *AgentOptions)
	closed    bool
}

type run struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func newFleet(t *testing.T, name string, nodes int) *fleet {
	t.Helper()
	f := newFleetOn(t, testenv.Need(t, env), name)
	for i := range nodes {
		f.addNode(fmt.Sprintf("%s-%d", name, i), i%2 == 1)
	}
	return f
}

// newFleetOn is a fleet of no node yet on the control plane e.
func newFleetOn(t *testing.T, e *testenv.Env, name string) *fleet {
	t.Helper()
	c, err := kube.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "uo")
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{t: t, env: e, kube: c, prefix: name + ".update.slipway.dev", mirror: filepath.Join(dir, "mirror"), dir: dir,
		agents: map[string]*run{}, plats: map[string]platform.Platform{}, br: map[string]*brapitest.Server{}, reboots: map[string]int{}, down: map[string]bool{}, stayDown: map[string]bool{}, boots: map[string]string{},
		log: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	f.usePrefix(f.prefix) // a fresh controller state: a test run again reuses its node names
	for _, v := range []string{"v1", "v2"} {
		if _, err := releasetest.Write(releasetest.Options{Mirror: f.mirror, Version: v, Arch: "amd64", RootfsFiles: 3}); err != nil {
			t.Fatal(err)
		}
	}
	if f.src, err = channel.New(f.mirror, channel.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.stopAll(); os.RemoveAll(dir) })
	return f
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b[:len(b)-1])); return len(b), nil }

// addNode creates a fake node (kwok makes it Ready) and its host at v1.
func (f *fleet) addNode(name string, bottlerocket bool) {
	if _, err := f.kube.CoreV1().Nodes().Create(context.Background(), testenv.FakeNode(name), metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = f.kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	f.adopt(name, bottlerocket)
}

// adopt gives an existing node a host at v1 and an agent.
func (f *fleet) adopt(name string, bottlerocket bool) {
	t, ctx := f.t, context.Background()
	f.setBootID(name)
	f.nodes = append(f.nodes, name)
	if bottlerocket {
		srv, err := brapitest.New(filepath.Join(f.dir, name+".sock"), "v1", "v2", func() { f.reboot(name) })
		if err != nil {
			t.Fatal(err)
		}
		srv.Lock(2) // the first actions meet a held update lock
		t.Cleanup(srv.Close)
		f.br[name] = srv
		f.plats[name] = &platform.Bottlerocket{Socket: filepath.Join(f.dir, name+".sock"), Poll: 20 * time.Millisecond, Backoff: 20 * time.Millisecond}
	} else {
		sys := filepath.Join(f.dir, name, "system")
		lock := filepath.Join(f.dir, name, "upgrade.lock")
		if _, err := upgrade.Run(ctx, upgrade.Options{SystemDir: sys, Source: f.src, Version: "v1", Arch: "amd64", LockFile: lock}); err != nil {
			t.Fatal(err)
		}
		f.plats[name] = &platform.Slipway{SystemDir: sys, Source: f.src, LockFile: lock, Rebooter: rebootFunc(func() { f.reboot(name) }),
			BootID: f.bootIDOf(name), CmdlineFile: filepath.Join(f.dir, name, "cmdline")}
	}
	f.startAgent(name)
}

type rebootFunc func()

func (r rebootFunc) Reboot(context.Context) error { go r(); return nil }
func (r rebootFunc) String() string               { return "simulated" }

func (f *fleet) startAgent(node string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.agents[node] != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &run{cancel: cancel, done: make(chan struct{})}
	f.agents[node] = r
	cfg := f.env.Config
	if f.agentWrap != nil {
		cfg = rest.CopyConfig(cfg)
		cfg.Wrap(f.agentWrap)
	}
	o := AgentOptions{Config: cfg, Prefix: f.prefix, NodeName: node, Platform: f.plats[node], BootID: f.bootIDOf(node),
		CheckInterval: 2 * time.Second, Resync: time.Second, StepTimeout: f.stepTimeout, Log: f.log.With("agent", node)}
	if f.agentEdit != nil {
		f.agentEdit(node, &o)
	}
	go func() {
		defer close(r.done)
		err := RunAgent(ctx, o)
		if err != nil {
			f.t.Errorf("agent %s: %v", node, err)
		}
	}()
}

func (f *fleet) stopAgent(node string) {
	f.mu.Lock()
	r := f.agents[node]
	delete(f.agents, node)
	f.mu.Unlock()
	if r != nil {
		r.cancel()
		<-r.done
	}
}

func (f *fleet) stopAll() {
	f.mu.Lock()
	f.closed = true
	nodes := make([]string, 0, len(f.agents))
	for n := range f.agents {
		nodes = append(nodes, n)
	}
	f.mu.Unlock()
	for _, n := range nodes {
		f.stopAgent(n)
	}
}

// reboot simulates a reboot of node: agent stopped, node NotReady a
// moment, back Ready with a new boot ID, agent started.
func (f *fleet) reboot(node string) {
	f.mu.Lock()
	f.down[node] = true
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.down, node)
		f.mu.Unlock()
		f.startAgent(node)
	}()
	f.stopAgent(node)
	f.mu.Lock()
	f.reboots[node]++
	f.mu.Unlock()
	ctx := context.Background()
	f.patch(node, map[string]any{"metadata": map[string]any{"annotations": map[string]any{testenv.DownAnnotation: "true"}}})
	f.waitReady(ctx, node, false)
	time.Sleep(500 * time.Millisecond)
	f.mu.Lock()
	stay := f.stayDown[node]
	f.mu.Unlock()
	if stay {
		f.setBootID(node)
		return
	}
	f.patch(node, map[string]any{"metadata": map[string]any{"annotations": map[string]any{testenv.DownAnnotation: nil}}})
	f.waitReady(ctx, node, true)
	f.setBootID(node)
}

func (f *fleet) isRebooting(node string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.down[node]
}

func (f *fleet) setBootID(node string) {
	id := fmt.Sprintf("boot-%d", time.Now().UnixNano())
	f.mu.Lock()
	f.boots[node] = id
	stale := f.staleStatusBootID && f.reboots[node] > 0
	f.mu.Unlock()
	if stale {
		return
	}
	data, _ := json.Marshal(map[string]any{"status": map[string]any{"nodeInfo": map[string]any{"bootID": id}}})
	if _, err := f.kube.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, data, metav1.PatchOptions{}, "status"); err != nil {
		f.t.Errorf("set the boot ID of %s: %v", node, err)
	}
}

// bootIDOf is the simulated host's boot ID (what its kernel would say),
// for the slipway platform's record of what each boot runs. It is the
// fleet's own, not read back from the Node: kwok may write a Node's status
// from an older read when it initializes the node.
func (f *fleet) bootIDOf(node string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.boots[node], nil
	}
}

func (f *fleet) patch(node string, p map[string]any) {
	data, _ := json.Marshal(p)
	if _, err := f.kube.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
		f.t.Errorf("patch %s: %v", node, err)
	}
}

func (f *fleet) waitReady(ctx context.Context, node string, ready bool) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		n, err := f.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err == nil && nodeReady(n) == ready {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	f.t.Errorf("node %s not Ready=%v after 30s", node, ready)
}

// version is what the node's host runs.
func (f *fleet) version(node string) string {
	v, err := f.plats[node].Version(context.Background())
	if err != nil {
		f.t.Errorf("version of %s: %v", node, err)
	}
	return v
}

// controller starts a controller; the returned func stops it.
func (f *fleet) controller(edit func(*ControllerOptions)) (stop func()) {
	o := f.controllerOptions(edit)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := RunController(ctx, o); err != nil {
			f.t.Errorf("controller: %v", err)
		}
	}()
	stop = func() { cancel(); <-done }
	// A test that fails before its own stop must not leave its controller
	// running into the next test: it manages every Node (one left running
	// lifted the next tests' cordons when every prefix shared one owner).
	f.t.Cleanup(stop)
	return stop
}

// controllerOptions are the tests' controller settings, edited.
func (f *fleet) controllerOptions(edit func(*ControllerOptions)) ControllerOptions {
	o := ControllerOptions{Config: f.env.Config, Prefix: f.prefix, OSImagePattern: "-", Namespace: "default",
		Resync: time.Second, Log: f.log.With("controller", true),
		Policy: Policy{MaxConcurrent: 1, Backoff: time.Second, BackoffMax: 4 * time.Second,
			Timeouts: Timeouts{Prepare: time.Minute, Perform: time.Minute, Reboot: time.Minute, Health: time.Minute, Reset: time.Minute}}}
	o.Drain = DefaultDrain()
	o.Drain.Timeout, o.Drain.RetryInterval = time.Minute, 200*time.Millisecond
	if edit != nil {
		edit(&o)
	}
	return o
}

// usePrefix makes the fleet speak prefix (one shared by several tests,
// such as the old operator's) from a fresh controller state: the previous
// test's record of its own nodes is gone.
func (f *fleet) usePrefix(prefix string) {
	f.prefix, f.keys = prefix, Keys{Prefix: prefix}
	err := f.kube.CoreV1().ConfigMaps("default").Delete(context.Background(), FleetStateName(prefix), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		f.t.Fatalf("remove the previous controller state of %s: %v", prefix, err)
	}
}

func (f *fleet) node(name string) *corev1.Node {
	n, err := f.kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatalf("read node %s: %v", name, err)
	}
	return n
}
