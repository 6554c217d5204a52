package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/generated/clientset/versioned"
	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/testenv/faults"
	"slipway.dev/slipway/ops/testenv/hostcheck"
	"slipway.dev/slipway/ops/testenv/monitor"
	"slipway.dev/slipway/upgrade/releasetest"
)

// The k3os system: one `slipway ops agent` per fake node (the first three
// control-plane nodes), each on its own system directory installed at v1
// from a local mirror, one `slipway ops controller`, every one of them
// reaching the API server through a fault-injecting proxy of its own; the
// UpdateChannel rolls v1 to v2 at concurrency 1 while the faults run.

const k3osNS = "slipway-system"

// k3osNodeScript is a fake node's boot (testenv.K3osNode): install v1 on
// the first boot, boot through slipway's loader (a swap a power cut left
// half done is finished, the versions chosen are written to the kernel
// command line and the node's boots log), run the agent through the node's
// proxy.
var k3osNodeScript = testenv.K3osNode{
	Mirror: `"$CHAOS_MIRROR"`, Kubeconfig: `"$CHAOS_KUBECONFIGS/agent-$NODE_NAME"`, Image: "slipway:chaos",
	Lease: "6s", Backoff: "20s", Upgrade: "slipway", Reboot: `"slipway-sim reboot --delay 1s"`, Loader: true,
}.Script()

// controlPlane is how many of the first nodes carry the control-plane role.
const controlPlane = 3

// k3osSpec is what the k3os run's faults may hit.
func k3osSpec(o Options, nodes []string) faults.Spec {
	agents, nodeTargets := []string{}, []string{}
	for _, n := range nodes {
		agents = append(agents, "agent/"+n)
		nodeTargets = append(nodeTargets, "node/"+n)
	}
	procs := append(agents, "controller/a", "controller/b")
	return faults.Spec{Duration: o.Duration, Gap: 1500 * time.Millisecond, MaxFor: 8 * time.Second, Targets: map[faults.Kind][]string{
		faults.Kill: procs, faults.Pause: procs,
		faults.Latency: procs, faults.HalfOpen: procs, faults.Partition: procs, faults.Drop: procs,
		faults.NotReady: nodeTargets, faults.Reregister: nodeTargets, faults.StallReboot: nodeTargets,
		faults.BlockEviction: {"pdb/default/guarded"},
		faults.PowerCut:      nodeTargets, faults.FullDisk: nodeTargets,
		faults.SlowSource: {k3osSource}, faults.FailSource: {k3osSource}, faults.CorruptSource: {k3osSource},
		faults.ClockStep: procs, faults.Reboot: nodeTargets, faults.SlowWrites: {k3osViewWrites},
	}, Weights: map[faults.Kind]int{
		faults.Kill: 4, faults.Pause: 3, faults.Latency: 2, faults.HalfOpen: 2, faults.Partition: 2, faults.Drop: 2,
		faults.NotReady: 2, faults.Reregister: 1, faults.BlockEviction: 1, faults.StallReboot: 2,
		faults.PowerCut: 2, faults.FullDisk: 1, faults.SlowSource: 1, faults.FailSource: 1, faults.CorruptSource: 1,
		faults.ClockStep: 2, faults.Reboot: 1, faults.SlowWrites: 1,
	}, Steps: k3osSteps}
}

// NodeNames are the fake nodes of a run of n nodes.
func NodeNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("node-%d", i+1)
	}
	return out
}

// K3osSchedule is the schedule a k3os run of opts draws from its seed
// (of opts.Kinds when set, as drawSchedule restricts every system's).
func K3osSchedule(opts Options) (faults.Schedule, error) {
	opts.System = "k3os"
	opts = opts.withDefaults()
	return drawSchedule(opts, &k3os{}, NodeNames(opts.Nodes))
}

// k3osSource is the target of the release source's faults.
const k3osSource = "source"

// k3osViewWrites is the target of the SlowWrites faults: the controllers'
// writes of the nodes' views (their NodeUpdates), held by the API server.
const k3osViewWrites = "writes/controller"

// k3osViewWriteScope is what k3osViewWrites holds: the controller
// ServiceAccount's creates and updates of NodeUpdates (their spec, the
// views; the agents' reports go to the status subresource, as another
// user).
var k3osViewWriteScope = faults.WriteScope{User: "system:serviceaccount:" + k3osNS + ":" + manifest.ControllerName,
	Rules: []admissionregv1.RuleWithOperations{{
		Operations: []admissionregv1.OperationType{admissionregv1.Create, admissionregv1.Update},
		Rule:       admissionregv1.Rule{APIGroups: []string{v1.SchemeGroupVersion.Group}, APIVersions: []string{"*"}, Resources: []string{"nodeupdates"}},
	}}}

// k3osSteps are the steps of the host upgrade (rootfs and kernel, the
// channel's default components) and of its rollback a power cut is drawn
// at: after staging, after each rename into place, after each link.
var k3osSteps = []string{"staged", "renamed:k3os", "renamed:kernel",
	"previous:k3os", "current:k3os", "previous:kernel", "current:kernel",
	"rollback:previous:k3os", "rollback:current:k3os", "rollback:previous:kernel", "rollback:current:kernel"}

// k3os is the k3os system.
type k3os struct {
	mirror string
	oc     versioned.Interface
	// source serves the mirror as the channel's http release source, with faults.
	source *faults.Source
	// writes holds the controllers' view writes (SlowWrites), from setup on.
	writes *faults.WriteHold
	// simMu guards sim: set by hostFaults as the faults start, read by
	// the variants' goroutines (injector).
	simMu sync.Mutex
	sim   *faults.Sim
	// hosts checks the nodes' files every second from start on.
	hosts     *hostcheck.Checker
	stopHosts context.CancelFunc
	hostsDone chan struct{}
	hostErr   error
}

func runK3os(ctx context.Context, o Options) (Result, error) {
	if wrap, ok := k3osWrappers[o.Variant]; ok { // guard_schedules.go
		return runSystem(ctx, o, wrap(&k3os{}))
	}
	return runSystem(ctx, o, &k3os{})
}

func (*k3os) spec(o Options, nodes []string) faults.Spec { return k3osSpec(o, nodes) }

func (*k3os) limits() monitor.Limits { return monitor.Limits{} }

func (s *k3os) nodeCommand(h *harness) ([]string, []string, error) {
	s.mirror = filepath.Join(h.dir, "mirror")
	for _, v := range []string{"v1", "v2"} {
		if _, err := releasetest.Write(releasetest.Options{Mirror: s.mirror, Version: v}); err != nil {
			return nil, nil, fmt.Errorf("write release %s: %w", v, err)
		}
	}
	var err error
	if s.source, err = faults.NewSource(s.mirror); err != nil {
		return nil, nil, err
	}
	s.hosts = hostcheck.New(filepath.Join(h.dir, "env", "nodes"), h.nodes) // testenv's NodesRoot under the run's Dir
	return []string{"/bin/sh", "-c", k3osNodeScript}, []string{"CHAOS_MIRROR=" + s.mirror, faults.HostFaultEnv}, nil
}

// setup applies the manifest's ServiceAccounts, RBAC and admission
// policies, as `slipway ops manifest` renders them for this run (its image,
// its upgrade command, the mirror and the release source the channel
// reads); the controllers reach the API server with a token of the
// controller's ServiceAccount and each agent as the agent's ServiceAccount
// bound to its node (agentKubeconfig).
func (s *k3os) setup(ctx context.Context, h *harness, kc kubernetes.Interface) error {
	objs := manifest.AccessObjects(k3osAccess(s.mirror, s.source.URL()))
	if err := applyAccess(ctx, kc, objs); err != nil {
		return err
	}
	var err error
	if s.writes, err = faults.StartWriteHold(ctx, kc, "k3os-views", k3osViewWriteScope, func(l string) { h.logf("%s", l) }); err != nil {
		return err
	}
	for _, n := range h.nodes[:min(controlPlane, len(h.nodes))] {
		patch := []byte(`{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":"true"}}}`)
		if _, err := kc.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("label %s control-plane: %w", n, err)
		}
	}
	agent := testenv.ServiceAccount(k3osNS, manifest.AgentName)
	for _, n := range h.nodes {
		if err := agentKubeconfig(h.kubeconfig("agent/"+n), agent, n); err != nil {
			return err
		}
	}
	for _, c := range controllers {
		if err := tokenKubeconfig(ctx, kc, h.admin, k3osNS, manifest.ControllerName, h.kubeconfig(c), "https://"+h.proxies[c].Addr()); err != nil {
			return err
		}
		if err := h.startProc(c, filepath.Join(h.o.Bin, "slipway"), "ops", "controller",
			"--identity", strings.ReplaceAll(c, "/", "-"), "--namespace", k3osNS, "--kubeconfig", h.kubeconfig(c),
			"--metrics-addr", "", "--lease-duration", "6s", "--resync", "10s", "--retry-backoff", "20s"); err != nil {
			return err
		}
	}
	return nil
}

// k3osAccess is the manifest as a k3os run installs it: the agents' Jobs
// run the run's image and upgrade command and may read the local mirror
// and download from the run's release source, nothing else.
func k3osAccess(mirror, source string) manifest.Options {
	return manifest.Options{Namespace: k3osNS, Image: "slipway:chaos", JobCommand: []string{"slipway"},
		MirrorDirs: []string{mirror}, ReleaseSources: []string{source}}
}

// agentKubeconfig rewrites the admin kubeconfig at path (it reaches the
// node's proxy) to act as id bound to node, as the agent's pod token on
// that node does (its node-name claim is what the agent's admission
// policies check). Impersonated rather than a TokenRequest bound to a pod:
// a Reregister fault deletes the Node, and with it any pod a token could
// be bound to, while the node's agent runs on.
func agentKubeconfig(path string, id *testenv.Identity, node string) error {
	cfg, err := testenv.KubeconfigAs(path, id, node)
	if err != nil {
		return fmt.Errorf("%s's agent kubeconfig: %w", node, err)
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write %s's agent kubeconfig: %w", node, err)
	}
	return nil
}

// start creates the channel at v1, waits for every agent to report it,
// then moves the channel to v2.
func (s *k3os) start(ctx context.Context, h *harness) error {
	var err error
	if s.oc, err = versioned.NewForConfig(h.env.Config); err != nil {
		return err
	}
	ch := &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: k3osNS}, Spec: v1.UpdateChannelSpec{
		URL: s.source.URL(), Version: "v1", Concurrency: 1, MaxFailures: 3,
		RebootDelay: &metav1.Duration{Duration: time.Second},
		Drain:       &v1.DrainSpec{Timeout: &metav1.Duration{Duration: 20 * time.Second}}}}
	if _, err := s.oc.OpsV1().UpdateChannels(k3osNS).Create(ctx, ch, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the channel: %w", err)
	}
	if err := waitChannel(ctx, s.oc, 3*time.Minute, func(ch *v1.UpdateChannel) bool {
		return ch.Status.Counts.Nodes == h.o.Nodes && ch.Status.Counts.UpToDate == h.o.Nodes
	}); err != nil {
		return fmt.Errorf("every agent to report v1: %w", err)
	}
	if _, err := s.oc.OpsV1().UpdateChannels(k3osNS).Patch(ctx, "default", types.MergePatchType, []byte(`{"spec":{"version":"v2"}}`), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch the channel to v2: %w", err)
	}
	s.watchHosts(ctx)
	return nil
}

// watchHosts checks the hosts' files every second (with the nodes holding
// a slot now) until hostViolations.
func (s *k3os) watchHosts(ctx context.Context) {
	ctx, s.stopHosts = context.WithCancel(ctx)
	s.hostsDone = make(chan struct{})
	go func() {
		defer close(s.hostsDone)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			ch, err := s.oc.OpsV1().UpdateChannels(k3osNS).Get(ctx, "default", metav1.GetOptions{})
			if err != nil {
				continue
			}
			slots := map[string]bool{}
			for _, n := range slotNodes(ch) {
				slots[n] = true
			}
			if _, err := s.hosts.Check(time.Now(), slots); err != nil {
				s.hostErr = err
			}
		}
	}()
}

// hostFaults gives the injector the release source and a log.
func (s *k3os) hostFaults(h *harness, sim *faults.Sim) {
	sim.Sources = map[string]*faults.Source{k3osSource: s.source}
	sim.Log = func(l string) { h.logf("%s", l) }
	sim.SlotHolders = s.slotHolders // a node's own reboot: did it hold a slot (reboot_schedules.go)
	sim.Writes = map[string]*faults.WriteHold{k3osViewWrites: s.writes}
	s.simMu.Lock()
	s.sim = sim
	s.simMu.Unlock()
}

// injector is the run's fault injector (nil before the faults start),
// for a variant's goroutine.
func (s *k3os) injector() *faults.Sim {
	s.simMu.Lock()
	defer s.simMu.Unlock()
	return s.sim
}

// stop ends the hold of the view writes and removes its webhook.
func (s *k3os) stop() {
	if s.writes != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.writes.Close(ctx)
	}
}

// hostViolations stops the host checks and returns what they found, with
// a last check once settled (no slot: every node's next boot is the one it
// runs); the hosts' checks are never excused by a fault.
func (s *k3os) hostViolations(settled bool) ([]monitor.Violation, error) {
	if s.stopHosts != nil {
		s.stopHosts()
		<-s.hostsDone
	}
	defer s.source.Close()
	if settled {
		if _, err := s.hosts.Quiet(time.Now()); err != nil {
			return nil, err
		}
	}
	var out []monitor.Violation
	for _, f := range s.hosts.Findings() {
		out = append(out, monitor.Violation{At: f.At, Invariant: f.Invariant, Key: f.Key, Message: f.Message})
	}
	return out, s.hostErr
}

func (s *k3os) settled(ctx context.Context, h *harness) (bool, string) {
	ch, err := s.oc.OpsV1().UpdateChannels(k3osNS).Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	out := fmt.Sprintf("%d/%d nodes at v2, %d failures, %d reboots; generation %d observed %d, slots %v, failed %v", ch.Status.Counts.UpToDate, h.o.Nodes,
		len(ch.Status.Failed), reboots(h.env, h.nodes), ch.Generation, ch.Status.ObservedGeneration, slotNodes(ch), ch.Status.Failed)
	ok := k3osSettled(ch, h.o.Nodes)
	if s.sim != nil {
		out += fmt.Sprintf("; host faults struck %v; release source: %d requests, %d failed, %d corrupted; %d host checks",
			s.sim.Fired(), s.source.Requests.Load(), s.source.Failed.Load(), s.source.Corrupted.Load(), s.hosts.Checks())
	}
	if ok {
		out += "; upgrade Jobs' errors: " + jobErrors(h)
	}
	return ok, out
}

func slotNodes(ch *v1.UpdateChannel) []string {
	var out []string
	for _, s := range ch.Status.Updating {
		out = append(out, s.Node)
	}
	return out
}

// k3osSettled: no slot held, every node counted, each at v2 or failed at
// it, or the channel Degraded (no new node starts).
func k3osSettled(ch *v1.UpdateChannel, nodes int) bool {
	if ch.Status.ObservedGeneration != ch.Generation || len(ch.Status.Updating) > 0 || ch.Status.Counts.Nodes != nodes {
		return false
	}
	if meta.IsStatusConditionTrue(ch.Status.Conditions, v1.ConditionDegraded) {
		return true
	}
	failed := 0
	for _, f := range ch.Status.Failed {
		if f.Version == "v2" {
			failed++
		}
	}
	return ch.Status.Counts.UpToDate+failed == nodes
}

// waitChannel polls the default channel every 500ms until cond or timeout.
func waitChannel(ctx context.Context, oc versioned.Interface, timeout time.Duration, cond func(*v1.UpdateChannel) bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ch, err := oc.OpsV1().UpdateChannels(k3osNS).Get(ctx, "default", metav1.GetOptions{})
		if err == nil && cond(ch) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not within %s: %w", timeout, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// writeKubeconfig writes an admin kubeconfig of cfg that reaches server.
func writeKubeconfig(path string, cfg *rest.Config, server string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["chaos"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["chaos"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken, ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["chaos"] = &clientcmdapi.Context{Cluster: "chaos", AuthInfo: "chaos"}
	kc.CurrentContext = "chaos"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// jobErrors counts, over the nodes' upgrade Job logs, the errors a host
// fault causes: no space, a verification failure (a corrupt artifact), a release source failing (503).
func jobErrors(h *harness) string {
	kinds := []struct{ name, text string }{{"no space", "no space"}, {"verification failed", "verification failed"}, {"503", "503"}}
	counts := make([]int, len(kinds))
	for _, n := range h.nodes {
		logs, _ := filepath.Glob(filepath.Join(h.env.NodeDir(n), "pods", "*.log"))
		for _, l := range logs {
			b, err := os.ReadFile(l)
			if err != nil {
				continue
			}
			for i, k := range kinds {
				counts[i] += strings.Count(string(b), k.text)
			}
		}
	}
	var parts []string
	for i, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d", k.name, counts[i]))
	}
	return strings.Join(parts, ", ")
}

// hostSystem is a system whose nodes are simulated hosts: it gives the
// injector what the host faults need, and its host checks' violations.
type hostSystem interface {
	hostFaults(h *harness, sim *faults.Sim)
	hostViolations(settled bool) ([]monitor.Violation, error)
}
