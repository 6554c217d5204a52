package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/testenv/faults"
	"slipway.dev/slipway/ops/testenv/monitor"
	uo "slipway.dev/slipway/ops/updateoperator"
)

// The update operator: one `slipway update-operator agent` per fake node
// on the command platform (the host's version a file in the node's
// directory, prepare and apply a copy, reboots through the supervisor),
// two controller replicas (--max-concurrent 2), every process behind its
// own proxy; the release every node reads moves from v1 to v2 as the
// faults start.

const uoMaxConcurrent = 2

// uoHaltAfter is the controllers' --halt-after (the brake).
const uoHaltAfter = 2

type updateOperator struct {
	nodes  int
	shared string
	kc     kubernetes.Interface
	keys   uo.Keys
	// variant "release-fails": v2 fails to prepare on every host; the
	// brake must hold it after uoHaltAfter nodes. "notready-after-update":
	// uoSickNode, back from its reboot on v2, goes NotReady for
	// uoSickFor before its agent reports (it sleeps uoSickAgentDelay at
	// boot): the update must end, its slot freed, within --state-timeout.
	variant string
	// "analysis": the controllers ask a stand-in Prometheus (prom) before
	// each start and during a 3 s bake after each node; it is down for
	// uoAnalysisDown from the first wave on, so the wave cannot be passed
	// and no node may start meanwhile (analysis-gate).
	prom *standInPrometheus
	// cancel ends the variant's steps with the run.
	cancel context.CancelFunc
}

// uoAnalysisDown is how long the analysis variant's Prometheus is down.
const uoAnalysisDown = 15 * time.Second

// uoStateTimeout is the controllers' --state-timeout and --drain-timeout.
const uoStateTimeout = 30 * time.Second

// The notready-after-update variant's node, how long it stays down, and
// how long its agent waits at each boot after the first (so that the node
// is down before the agent says it is back).
const (
	uoSickNode       = "node-1"
	uoSickFor        = 75 * time.Second
	uoSickAgentDelay = "4"
)

func (s *updateOperator) stop() {
	if s.cancel != nil {
		s.cancel()
	}
	if s.prom != nil {
		s.prom.close()
	}
}

func runUpdateOperator(ctx context.Context, o Options) (Result, error) {
	if o.Variant != "" && o.Variant != "release-fails" && o.Variant != "notready-after-update" && o.Variant != "analysis" && o.Variant != variantLostCordon {
		return Result{}, fmt.Errorf("update-operator: unknown variant %q", o.Variant)
	}
	return runSystem(ctx, o, &updateOperator{nodes: o.Nodes, variant: o.Variant})
}

func (*updateOperator) spec(o Options, nodes []string) faults.Spec {
	return k3osSpec(o, nodes) // the same targets: agents, controllers, nodes, the PDB
}

func (*updateOperator) limits() monitor.Limits {
	return monitor.Limits{OperatorMaxConcurrent: uoMaxConcurrent, OperatorHaltAfter: uoHaltAfter, OperatorStateTimeout: uoStateTimeout}
}

func (s *updateOperator) nodeCommand(h *harness) ([]string, []string, error) {
	s.shared = filepath.Join(h.dir, "shared")
	if err := os.MkdirAll(s.shared, 0o755); err != nil {
		return nil, nil, err
	}
	release := filepath.Join(s.shared, "release")
	scripts := map[string]string{
		"version.sh": `cat version 2>/dev/null || echo v1`,
		"check.sh":   `cat ` + release,
		"prepare.sh": `sleep 1; cat ` + release + ` > staged`,
		"apply.sh":   `cp staged version`,
		"reboot.sh":  `exec slipway-sim reboot --delay 2s`,
	}
	if s.variant == "release-fails" {
		scripts["prepare.sh"] = `sleep 1; if grep -q v2 ` + release + `; then echo "v2 does not verify" >&2; exit 1; fi; cat ` + release + ` > staged`
	}
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(s.shared, name), []byte("set -e\n"+body+"\n"), 0o755); err != nil {
			return nil, nil, err
		}
	}
	if err := os.WriteFile(release, []byte("v1\n"), 0o644); err != nil {
		return nil, nil, err
	}
	sh := func(n string) string { return "/bin/sh " + filepath.Join(s.shared, n) }
	script := `mkdir -p "$SLIPWAY_NODE_DIR/run" && echo "$NODE_NAME-boot-$SLIPWAY_NODE_BOOT" > "$SLIPWAY_NODE_DIR/run/boot_id"; `
	if s.variant == "notready-after-update" {
		script += `if [ "$NODE_NAME" = ` + uoSickNode + ` ] && [ "$SLIPWAY_NODE_BOOT" -gt 1 ]; then sleep ` + uoSickAgentDelay + `; fi; `
	}
	script += `exec slipway update-operator agent --platform command --kubeconfig "$CHAOS_KUBECONFIGS/agent-$NODE_NAME" ` +
		fmt.Sprintf(`--check-command %q --prepare-command %q --apply-command %q --reboot-command %q --version-command %q `,
			sh("check.sh"), sh("prepare.sh"), sh("apply.sh"), sh("reboot.sh"), sh("version.sh")) +
		`--check-interval 2s --health-addr "" --boot-id-file "$SLIPWAY_NODE_DIR/run/boot_id"`
	return []string{"/bin/sh", "-c", script}, nil, nil
}

// setup applies the manifest's RBAC and admission policies, starts the
// controllers with its controller ServiceAccount's token, and has each
// agent act as the agent ServiceAccount bound to its node (agentKubeconfig,
// as the k3os agents do): the node-name claim the agent policy checks, so
// a run proves the agents confined to their own Node's keys too.
func (s *updateOperator) setup(ctx context.Context, h *harness, kc kubernetes.Interface) error {
	objs, err := uo.ManifestObjects(uo.ManifestOptions{Platform: "command", OSImagePattern: "-", Image: "slipway:chaos"})
	if err != nil {
		return err
	}
	if err := applyAccess(ctx, kc, objs); err != nil {
		return err
	}
	agent := testenv.ServiceAccount(uo.DefaultNamespace, uo.AgentName)
	for _, n := range h.nodes {
		if err := agentKubeconfig(h.kubeconfig("agent/"+n), agent, n); err != nil {
			return err
		}
	}
	var extra []string
	if s.variant == "analysis" {
		if s.prom, err = startPrometheus(); err != nil {
			return err
		}
		file := filepath.Join(s.shared, "analysis.yaml")
		spec := "queries:\n- name: errors\n  query: sum(rate(app_errors_total[1m]))\n  condition: \"< 1\"\n"
		if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
			return err
		}
		extra = []string{"--prometheus-url", s.prom.URL(), "--analysis-file", file, "--bake-time", "3s", "--analysis-interval", "1s"}
	}
	for _, c := range controllers {
		if err := tokenKubeconfig(ctx, kc, h.admin, uo.DefaultNamespace, uo.ControllerName, h.kubeconfig(c), "https://"+h.proxies[c].Addr()); err != nil {
			return err
		}
		if err := h.startProc(c, append([]string{filepath.Join(h.o.Bin, "slipway"), "update-operator", "controller", "--kubeconfig", h.kubeconfig(c),
			"--namespace", uo.DefaultNamespace, "--lease", uo.LeaseName, "--lease-duration", "6s", "--metrics-addr", "", "--health-addr", "",
			"--os-image-pattern", "-", "--pause-between", "0s", "--max-concurrent", fmt.Sprint(uoMaxConcurrent), "--halt-after", fmt.Sprint(uoHaltAfter),
			"--state-timeout", uoStateTimeout.String(), "--drain-timeout", uoStateTimeout.String(), "--failure-backoff", "1s", "--failure-backoff-max", "4s"}, extra...)...); err != nil {
			return err
		}
	}
	return nil
}

// start waits until every agent reports v1, then publishes v2.
func (s *updateOperator) start(ctx context.Context, h *harness) error {
	var err error
	if s.kc, err = kubernetes.NewForConfig(h.env.Config); err != nil {
		return err
	}
	if s.keys, err = uo.NewKeys(""); err != nil {
		return err
	}
	if err := s.waitNodes(ctx, 3*time.Minute, func(n *corev1.Node) bool { return s.at(n, "v1") }); err != nil {
		return fmt.Errorf("every agent to report v1: %w", err)
	}
	if err := s.confined(ctx, h); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.shared, "release"), []byte("v2\n"), 0o644); err != nil {
		return err
	}
	switch s.variant {
	case "notready-after-update":
		vctx, cancel := context.WithCancel(ctx)
		s.cancel = cancel
		go s.sickAfterReboot(vctx, h)
	case "analysis":
		vctx, cancel := context.WithCancel(ctx)
		s.cancel = cancel
		go s.analysisDown(vctx, h)
	}
	return nil
}

// sickAfterReboot takes uoSickNode down as soon as it is back from its
// first reboot (its command started again), before its agent reports the
// update done, and brings it back uoSickFor later.
func (s *updateOperator) sickAfterReboot(ctx context.Context, h *harness) {
	for h.env.Supervisor.Boots(uoSickNode) < 2 {
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	down := func(ctx context.Context, v any) error {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{testenv.DownAnnotation: v}}})
		_, err := s.kc.CoreV1().Nodes().Patch(ctx, uoSickNode, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	}
	if err := down(ctx, "true"); err != nil {
		h.logf("variant: take %s down: %v", uoSickNode, err)
		return
	}
	h.logf("variant: %s back from its reboot, taken NotReady for %s", uoSickNode, uoSickFor)
	select {
	case <-ctx.Done():
	case <-time.After(uoSickFor):
	}
	uctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := down(uctx, nil); err != nil {
		h.logf("variant: bring %s back: %v", uoSickNode, err)
		return
	}
	h.logf("variant: %s Ready again", uoSickNode)
}

// at: the node runs v, is stable and holds no cordon.
func (s *updateOperator) at(n *corev1.Node, v string) bool {
	return n.Annotations[s.keys.Key(uo.KeyCurrentVersion)] == v && n.Annotations[s.keys.Wanted()] == string(uo.IntentStabilize) &&
		n.Annotations[s.keys.State()] == string(uo.StateUpToDate) && !n.Spec.Unschedulable && drain.CordonedBy(n.Annotations) == ""
}

func (s *updateOperator) waitNodes(ctx context.Context, timeout time.Duration, cond func(*corev1.Node) bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if ok, _ := s.count(ctx, cond); ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not within %s: %w", timeout, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// count reports whether every node meets cond, and those that do not.
func (s *updateOperator) count(ctx context.Context, cond func(*corev1.Node) bool) (bool, []string) {
	nodes, err := s.kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, []string{err.Error()}
	}
	var behind []string
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if !cond(n) {
			behind = append(behind, fmt.Sprintf("%s (version %s, wanted %s, state %s, unschedulable %t)", n.Name, n.Annotations[s.keys.Key(uo.KeyCurrentVersion)],
				n.Annotations[s.keys.Wanted()], n.Annotations[s.keys.State()], n.Spec.Unschedulable))
		}
	}
	return len(nodes.Items) == s.nodes && len(behind) == 0, behind
}

func (s *updateOperator) settled(ctx context.Context, h *harness) (bool, string) {
	if s.variant == "release-fails" {
		return s.braked(ctx, h)
	}
	ok, behind := s.count(ctx, func(n *corev1.Node) bool { return s.at(n, "v2") })
	out := fmt.Sprintf("%d/%d nodes at v2, %d reboots", h.o.Nodes-len(behind), h.o.Nodes, reboots(h.env, h.nodes))
	if len(behind) > 0 {
		out += "; behind: " + strings.Join(behind, "; ")
	}
	return ok, out
}

// braked: the broken release halted: no node in flight, every node on v1,
// uncordoned, at rest, and at least uoHaltAfter of them failed it.
func (s *updateOperator) braked(ctx context.Context, h *harness) (bool, string) {
	failed := 0
	ok, behind := s.count(ctx, func(n *corev1.Node) bool {
		if n.Annotations[s.keys.Key(uo.KeyFailures)] != "" && n.Annotations[s.keys.Key(uo.KeyFailures)] != "0" {
			failed++
		}
		v := s.keys.View(n, "")
		return v.Current == "v1" && !uo.InFlight(v) && !n.Spec.Unschedulable && drain.CordonedBy(n.Annotations) == "" &&
			(v.Wanted == uo.IntentStabilize || v.Wanted == uo.IntentReset)
	})
	out := fmt.Sprintf("%d nodes failed v2 (halt after %d), %d reboots", failed, uoHaltAfter, reboots(h.env, h.nodes))
	if len(behind) > 0 {
		out += "; not at rest on v1: " + strings.Join(behind, "; ")
	}
	return ok && failed >= uoHaltAfter, out
}

// confined checks, with the first agent's own credentials, that the API
// server holds it to its own Node's agent keys: its report on another
// node, and the controller's intent on its own, are refused (dry runs:
// admission runs, nothing is written).
func (s *updateOperator) confined(ctx context.Context, h *harness) error {
	if len(h.nodes) < 2 {
		return nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", h.kubeconfig("agent/"+h.nodes[0]))
	if err != nil {
		return fmt.Errorf("the agent's kubeconfig: %w", err)
	}
	ac, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// An admission policy is enforced once the API server has loaded and
	// type-checked it, a few seconds after its creation: asked again until
	// then.
	deadline := time.Now().Add(time.Minute)
	for {
		allowed := ""
		for _, w := range []struct{ node, key, what string }{
			{h.nodes[1], s.keys.Key(uo.KeyCurrentVersion), "its report on another node"},
			{h.nodes[0], s.keys.Wanted(), "the controller's intent on its own node"},
		} {
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{w.key: "v9"}}})
			_, err := ac.CoreV1().Nodes().Patch(ctx, w.node, types.MergePatchType, patch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
			switch {
			case err == nil:
				allowed = fmt.Sprintf("%s (%s on %s)", w.what, w.key, w.node)
			case !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err):
				return fmt.Errorf("agent %s writing %s: %w", h.nodes[0], w.what, err)
			}
		}
		if allowed == "" {
			h.logf("agent %s refused %s's keys and the controller's intent (least privilege holds)", h.nodes[0], h.nodes[1])
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("agent %s may still write %s a minute after the policies were applied: its identity is not confined", h.nodes[0], allowed)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// analysisDown takes the stand-in Prometheus down for uoAnalysisDown once
// the fleet state first holds a wave (a node finished: its bake began).
func (s *updateOperator) analysisDown(ctx context.Context, h *harness) {
	for {
		cm, err := s.kc.CoreV1().ConfigMaps(uo.DefaultNamespace).Get(ctx, uo.FleetStateName(""), metav1.GetOptions{})
		if err == nil {
			var f uo.Fleet
			if json.Unmarshal([]byte(cm.Data["fleet"]), &f) == nil && len(f.Wave) > 0 {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	s.prom.down.Store(true)
	h.logf("variant: the wave began: Prometheus down for %s (%d queries so far)", uoAnalysisDown, s.prom.queries.Load())
	select {
	case <-ctx.Done():
	case <-time.After(uoAnalysisDown):
	}
	s.prom.down.Store(false)
	h.logf("variant: Prometheus back (%d queries so far)", s.prom.queries.Load())
}
