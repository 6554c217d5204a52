package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/crds"
	"slipway.dev/slipway/ops/generated/clientset/versioned"
	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/testenv/faults"
	"slipway.dev/slipway/ops/testenv/monitor"
	"slipway.dev/slipway/upgrade/releasetest"
)

// The k3os system: one `slipway ops agent` per fake node (the first three
// control-plane nodes), each on its own system directory installed at v1
// from a local mirror, one `slipway ops controller`, every one of them
// reaching the API server through a fault-injecting proxy of its own; the
// UpdateChannel rolls v1 to v2 at concurrency 1 while the faults run.

const k3osNS = "slipway-system"

// k3osNodeScript is a fake node's boot: install v1 on the first boot, write
// the kernel command line the loader would at each boot, run the agent
// through the node's proxy.
const k3osNodeScript = `set -e
sys="$SLIPWAY_NODE_DIR/k3os/system"
mkdir -p "$sys" "$SLIPWAY_NODE_DIR/run/k3os"
if [ ! -e "$sys/k3os/current" ]; then
  slipway ops upgrade --system-dir "$sys" --source "$CHAOS_MIRROR" --version v1 --rootfs --kernel \
    --reboot=false --lock-file "$SLIPWAY_NODE_DIR/run/k3os/upgrade.lock"
fi
if [ "$(cat "$SLIPWAY_NODE_DIR/cmdline.boot" 2>/dev/null)" != "$SLIPWAY_NODE_BOOT" ]; then
  echo "slipway.rootfs=$(basename "$(readlink "$sys/k3os/current")")" > "$SLIPWAY_NODE_DIR/cmdline"
  echo "$SLIPWAY_NODE_BOOT" > "$SLIPWAY_NODE_DIR/cmdline.boot"
fi
exec slipway ops agent --cmdline-file "$SLIPWAY_NODE_DIR/cmdline" --node-name "$NODE_NAME" --namespace slipway-system --system-dir "$sys" \
  --host-system-dir /k3os/system --host-lock-dir /run/k3os --image slipway:chaos \
  --reboot-method command --boot-id-from-node \
  --metrics-addr "" --kubeconfig "$CHAOS_KUBECONFIGS/agent-$NODE_NAME" --lease-duration 6s --resync 10s --retry-backoff 20s \
  --upgrade-command slipway \
  --reboot-command "slipway-sim reboot --delay 1s"
`

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
	spec := faults.Spec{Duration: o.Duration, Gap: 1500 * time.Millisecond, MaxFor: 8 * time.Second, Targets: map[faults.Kind][]string{
		faults.Kill: procs, faults.Pause: procs,
		faults.Latency: procs, faults.HalfOpen: procs, faults.Partition: procs, faults.Drop: procs,
		faults.NotReady: nodeTargets, faults.Reregister: nodeTargets,
		faults.BlockEviction: {"pdb/default/guarded"},
	}, Weights: map[faults.Kind]int{
		faults.Kill: 4, faults.Pause: 3, faults.Latency: 2, faults.HalfOpen: 2, faults.Partition: 2, faults.Drop: 2,
		faults.NotReady: 2, faults.Reregister: 1, faults.BlockEviction: 1,
	}}
	if len(o.Kinds) > 0 {
		for k := range spec.Weights {
			if !slices.Contains(o.Kinds, k) {
				spec.Weights[k] = 0
			}
		}
	}
	return spec
}

// NodeNames are the fake nodes of a run of n nodes.
func NodeNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("node-%d", i+1)
	}
	return out
}

// K3osSchedule is the schedule a k3os run of opts draws from its seed.
func K3osSchedule(opts Options) faults.Schedule {
	opts = opts.withDefaults()
	return faults.Generate(opts.Seed, k3osSpec(opts, NodeNames(opts.Nodes)))
}

func runK3os(ctx context.Context, o Options) (res Result, err error) {
	start := time.Now()
	res = Result{System: o.System, Seed: o.Seed, Name: o.Name, Nodes: o.Nodes, Duration: o.Duration, Kinds: o.Kinds}
	res.Schedule = o.Schedule
	if res.Schedule == nil {
		res.Schedule = K3osSchedule(o)
	}
	dir, err := os.MkdirTemp("", "slipway-chaos-k3os-")
	if err != nil {
		return res, err
	}
	defer func() {
		if o.Keep || (err == nil && res.Failed()) {
			res.Dir = dir
			return
		}
		_ = os.RemoveAll(dir)
	}()
	logf := func(format string, a ...any) {
		fmt.Fprintf(o.Log, "chaos k3os: "+format+"\n", a...)
	}
	mirror := filepath.Join(dir, "mirror")
	for _, v := range []string{"v1", "v2"} {
		if _, err := releasetest.Write(releasetest.Options{Mirror: mirror, Version: v}); err != nil {
			return res, fmt.Errorf("write release %s: %w", v, err)
		}
	}
	kcDir := filepath.Join(dir, "kubeconfigs")
	for _, d := range []string{kcDir, filepath.Join(dir, "env")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return res, err
		}
	}
	proxies := map[string]*faults.Proxy{}
	defer func() {
		for _, p := range proxies {
			_ = p.Close()
		}
	}()
	ctrls := map[string]*proc{}
	defer func() {
		for _, c := range ctrls {
			c.stop(10 * time.Second)
		}
	}()
	nodes := NodeNames(o.Nodes)
	simLog, err := os.Create(filepath.Join(dir, "sim.log"))
	if err != nil {
		return res, err
	}
	defer simLog.Close()
	setup := func(ctx context.Context, cfg *rest.Config) error {
		kc, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: k3osNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create namespace: %w", err)
		}
		for _, n := range nodes[:min(controlPlane, len(nodes))] {
			patch := []byte(`{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":"true"}}}`)
			if _, err := kc.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("label %s control-plane: %w", n, err)
			}
		}
		targets := []string{"controller/a", "controller/b"}
		for _, n := range nodes {
			targets = append(targets, "agent/"+n)
		}
		for _, t := range targets {
			p, err := faults.NewProxy("127.0.0.1:0", strings.TrimPrefix(cfg.Host, "https://"))
			if err != nil {
				return err
			}
			proxies[t] = p
			if err := writeKubeconfig(filepath.Join(kcDir, strings.ReplaceAll(t, "/", "-")), cfg, "https://"+p.Addr()); err != nil {
				return err
			}
		}
		for _, id := range []string{"a", "b"} {
			c := newProc("controller/"+id, filepath.Join(dir, "controller-"+id+".log"), filepath.Join(o.Bin, "slipway"), "ops", "controller",
				"--identity", "controller-"+id, "--namespace", k3osNS, "--kubeconfig", filepath.Join(kcDir, "controller-"+id),
				"--metrics-addr", "", "--lease-duration", "6s", "--resync", "10s", "--retry-backoff", "20s")
			if err := c.start(); err != nil {
				return err
			}
			ctrls["controller/"+id] = c
		}
		return guardedWorkload(ctx, kc)
	}
	env, err := testenv.Start(ctx, testenv.Options{
		Cluster: true, Nodes: o.Nodes, CRDs: crds.Must(), ToolsDir: o.ToolsDir, Dir: filepath.Join(dir, "env"), Timeout: 5 * time.Minute,
		ExecPath: o.Bin + ":/usr/local/bin:/usr/bin:/bin", NodeCommand: []string{"/bin/sh", "-c", k3osNodeScript},
		NodeEnv: []string{"CHAOS_MIRROR=" + mirror, "CHAOS_KUBECONFIGS=" + kcDir},
		Logger:  slog.New(slog.NewTextHandler(simLog, nil)), Log: simLog, Setup: setup,
	})
	if err != nil {
		return res, fmt.Errorf("start the simulated cluster: %w", err)
	}
	defer env.Stop()
	logf("cluster up in %s", time.Since(start).Round(time.Second))
	kc, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return res, err
	}
	oc, err := versioned.NewForConfig(env.Config)
	if err != nil {
		return res, err
	}
	// The monitor as a process too, beside the one in this process: what
	// it costs (CPU, memory, API requests), and a second opinion.
	monLog := filepath.Join(dir, "monitor.log")
	monProc := newProc("monitor", monLog, filepath.Join(o.Bin, "slipway-sim"), "monitor", "--kubeconfig", env.Kubeconfig,
		"--out", filepath.Join(dir, "monitor.jsonl"))
	if err := monProc.start(); err != nil {
		return res, err
	}
	defer monProc.stop(10 * time.Second)
	mctx, stopMonitor := context.WithCancel(ctx)
	defer stopMonitor()
	mon, err := monitor.New(monitor.Config{})
	if err != nil {
		return res, err
	}
	if err := mon.Run(mctx, env.Config); err != nil {
		return res, err
	}
	ch := &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: k3osNS}, Spec: v1.UpdateChannelSpec{
		URL: "file://" + mirror, Version: "v1", Concurrency: 1, MaxFailures: 3,
		RebootDelay: &metav1.Duration{Duration: time.Second},
		Drain:       &v1.DrainSpec{Timeout: &metav1.Duration{Duration: 20 * time.Second}}}}
	if _, err := oc.OpsV1().UpdateChannels(k3osNS).Create(ctx, ch, metav1.CreateOptions{}); err != nil {
		return res, fmt.Errorf("create the channel: %w", err)
	}
	if err := waitChannel(ctx, oc, 3*time.Minute, func(ch *v1.UpdateChannel) bool {
		return ch.Status.Counts.Nodes == o.Nodes && ch.Status.Counts.UpToDate == o.Nodes
	}); err != nil {
		return res, fmt.Errorf("every agent to report v1: %w", err)
	}
	logf("every agent at v1 after %s; rolling out v2 under %d faults", time.Since(start).Round(time.Second), len(res.Schedule))
	if _, err := oc.OpsV1().UpdateChannels(k3osNS).Patch(ctx, "default", types.MergePatchType, []byte(`{"spec":{"version":"v2"}}`), metav1.PatchOptions{}); err != nil {
		return res, fmt.Errorf("patch the channel to v2: %w", err)
	}
	sim := &faults.Sim{Env: env, Client: kc, Proxies: proxies, Procs: map[string]faults.Proc{}}
	for n, c := range ctrls {
		sim.Procs[n] = c
	}
	faultsStart := time.Now()
	res.Faults = faults.Run(ctx, res.Schedule, sim, func(l string) { logf("%s", l) })
	logf("faults over after %s; waiting for the rollout to settle", time.Since(start).Round(time.Second))
	var last *v1.UpdateChannel
	err = waitChannel(ctx, oc, o.Settle, func(ch *v1.UpdateChannel) bool {
		last = ch
		return k3osSettled(ch, o.Nodes)
	})
	res.Settled = err == nil
	if last != nil {
		res.Outcome = fmt.Sprintf("%d/%d nodes at v2, %d failures, %d reboots", last.Status.Counts.UpToDate, o.Nodes, len(last.Status.Failed), reboots(env, nodes))
	}
	if !res.Settled && last != nil {
		res.Unsettled = fmt.Sprintf("generation %d observed %d, slots %v, counts %+v, failed %v", last.Generation, last.Status.ObservedGeneration,
			last.Status.Updating, last.Status.Counts, last.Status.Failed)
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	// A last check once quiet, then the monitor's findings.
	mon.Tick()
	if res.Settled {
		mon.CheckQuiet()
	}
	res.Checks, res.MonitorErrors = mon.Checks(), mon.Errors()
	for _, v := range mon.Violations() {
		if Excused(v, res.Schedule, faultsStart) {
			res.Excused = append(res.Excused, v)
		} else {
			res.Violations = append(res.Violations, v)
		}
	}
	res.Wall = time.Since(start)
	monProc.stop(10 * time.Second)
	res.MonitorProcess = lastLine(monLog, "checks,")
	if err := writeViolations(filepath.Join(dir, "violations.jsonl"), append(res.Violations, res.Excused...)); err != nil {
		return res, err
	}
	return res, nil
}

// lastLine is the last line of the file at path that contains sub.
func lastLine(path, sub string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(string(b), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], sub) {
			return strings.TrimSpace(lines[i])
		}
	}
	return ""
}

// reboots counts the simulated reboots since the nodes' first boot.
func reboots(env *testenv.Env, nodes []string) int {
	n := 0
	for _, node := range nodes {
		n += max(env.Supervisor.Boots(node)-1, 0)
	}
	return n
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
