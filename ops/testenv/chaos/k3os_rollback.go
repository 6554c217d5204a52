package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/testenv/faults"
	"slipway.dev/slipway/ops/testenv/hostcheck"
	"slipway.dev/slipway/ops/testenv/monitor"
)

// The k3os system's "analysis-rollback" variant: once the rollout started,
// the channel gets an analysis with `onFailure: rollback` on a stand-in
// Prometheus whose one metric is the number of nodes that booted v2 (the
// release's errors, on the nodes running it; the condition "< 1"). The
// first node to finish v2 makes its wave fail: the channel halts and rolls
// the wave back in rollback slots. The faults strike the rollback itself:
// the rollback slot's node has its agent SIGKILLed as the slot appears and
// again at its reboot, and both controllers (the Lease holder with them)
// are SIGKILLed once the slot is past its Job, at its drain or reboot
// (beside the schedule's own faults). The
// monitor's invariants must hold throughout, the rollback end (every node
// of the wave back or reported), and each node of the wave boot the
// version it ran before (InvRollbackRestores, judged on the hosts' files).

const variantRollback = "analysis-rollback"

// InvRollbackRestores: a node of a failed wave rolled back
// (onFailure: rollback) ends booted, whole, on the version it ran before.
const InvRollbackRestores = "rollback-restores-previous"

func init() {
	Schedules["k3os-analysis-rollback"] = Named{System: "k3os", Nodes: 5, Variant: variantRollback,
		Doc: "a failed wave rolled back (onFailure: rollback) with its node's agent and the controller killed during the rollback: invariants hold, the wave's nodes end on their previous version",
		Schedule: faults.Schedule{
			{At: 20 * time.Second, Kind: faults.Pause, Target: "controller/b", For: 3 * time.Second},
			{At: 30 * time.Second, Kind: faults.Latency, Target: "agent/node-1", For: 5 * time.Second, Arg: 300 * time.Millisecond},
		}}
}

// k3osRollback is the k3os system run with variantRollback.
type k3osRollback struct {
	*k3os
	mu sync.Mutex
	// struck are the faults the variant struck during the rollback, as lines.
	struck []string
	// wave is the failed wave's nodes and the version each goes back to,
	// as the channel's status last said.
	wave map[string]string
}

// bootedV2 counts the nodes whose last boot runs rootfs v2.
func bootedV2(h *harness) float64 {
	n := 0
	for _, node := range h.nodes {
		host, err := hostcheck.ReadHost(node, h.env.NodeDir(node))
		if err != nil {
			continue
		}
		if b, ok := host.Booted(); ok && b.Rootfs == "v2" {
			n++
		}
	}
	return float64(n)
}

func (s *k3osRollback) startVariant(ctx context.Context, h *harness) (stop func(), err error) {
	return s.startAnalysis(ctx, analysisSpec{query: `sum(app_errors_total{node=~"$nodes"})`, onFailure: "rollback", value: func() float64 { return bootedV2(h) }},
		func(ctx context.Context, _ *standInPrometheus) { s.strikeRollback(ctx, h) })
}

// strikeRollback watches the channel and strikes each rollback slot: its
// node's agent SIGKILLed as the slot appears and at its reboot, the
// controllers SIGKILLed once it is past its Job.
func (s *k3osRollback) strikeRollback(ctx context.Context, h *harness) {
	done := map[string]bool{} // node/phase struck
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
		ch, err := s.oc.OpsV1().UpdateChannels(k3osNS).Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			continue
		}
		s.noteWave(ch)
		for _, slot := range ch.Status.Updating {
			if !slot.Rollback {
				continue
			}
			switch {
			case !done[slot.Node+"/start"]:
				done[slot.Node+"/start"] = true
				s.strike(h, fmt.Sprintf("kill agent/%s (rollback slot granted, phase %q)", slot.Node, slot.Phase), func() (bool, error) { return h.env.Crash(slot.Node) })
			case slot.Phase != plan.PhasePending && slot.Phase != plan.PhaseUpgrading && !done[slot.Node+"/controllers"]:
				// Past its Job (Draining, or already Rebooting when the
				// drain was quick): the controller that drains it goes.
				done[slot.Node+"/controllers"] = true
				for _, c := range controllers {
					if p := h.procs[c]; p != nil {
						s.strike(h, fmt.Sprintf("kill %s (%s's rollback slot %s)", c, slot.Node, slot.Phase), p.Kill)
					}
				}
			case (slot.Phase == plan.PhaseRebooting || slot.Phase == plan.PhaseWaitingReady) && !done[slot.Node+"/reboot"]:
				done[slot.Node+"/reboot"] = true
				s.strike(h, fmt.Sprintf("kill agent/%s (rollback slot %s)", slot.Node, slot.Phase), func() (bool, error) { return h.env.Crash(slot.Node) })
			}
		}
	}
}

// strike applies one of the variant's faults and records it.
func (s *k3osRollback) strike(h *harness, what string, fn func() (bool, error)) {
	ok, err := fn()
	line := what
	switch {
	case err != nil:
		line += ": failed: " + err.Error()
	case !ok:
		line += ": skipped (not running)"
	}
	h.logf("variant: %s", line)
	s.mu.Lock()
	s.struck = append(s.struck, line)
	s.mu.Unlock()
}

// noteWave records the failed wave's nodes and their previous versions.
func (s *k3osRollback) noteWave(ch *v1.UpdateChannel) {
	a := ch.Status.Analysis
	if a == nil || a.Rollback == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wave == nil {
		s.wave = map[string]string{}
	}
	for _, n := range a.Rollback.Nodes {
		if n.To != "" {
			s.wave[n.Node] = n.To
		}
	}
}

// settled: the wave was rolled back (every node back or reported) and
// judged again, with no slot left.
func (s *k3osRollback) settled(ctx context.Context, h *harness) (bool, string) {
	ch, err := s.oc.OpsV1().UpdateChannels(k3osNS).Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	s.noteWave(ch)
	_, base := s.k3os.settled(ctx, h)
	s.mu.Lock()
	struck := slices.Clone(s.struck)
	s.mu.Unlock()
	out := base + fmt.Sprintf("; faults during the rollback: [%s]", strings.Join(struck, "; "))
	a := ch.Status.Analysis
	if a == nil || a.Rollback == nil {
		return false, out + "; no rollback yet"
	}
	rb := a.Rollback
	var nodes []string
	for _, n := range rb.Nodes {
		nodes = append(nodes, fmt.Sprintf("%s %s->%s %s", n.Node, n.From, n.To, n.State))
	}
	out += fmt.Sprintf("; rollback %s (%d back): %s; verdict %q", rb.State, rb.RolledBack, strings.Join(nodes, ", "), rb.Verdict)
	judged := rb.State == "Cured" || rb.State == "NotCured"
	return judged && len(ch.Status.Updating) == 0 && ch.Status.ObservedGeneration == ch.Generation, out
}

// hostViolations adds to the host checks' findings the wave's nodes that
// do not boot, whole, the version they ran before.
func (s *k3osRollback) hostViolations(settled bool) ([]monitor.Violation, error) {
	out, err := s.k3os.hostViolations(settled)
	s.mu.Lock()
	wave := maps.Clone(s.wave)
	s.mu.Unlock()
	if !settled {
		return out, err
	}
	if len(wave) == 0 {
		out = append(out, monitor.Violation{At: time.Now(), Invariant: InvRollbackRestores, Key: "channel/default",
			Message: "the analysis never failed a wave: no rollback to judge (the stand-in metric did not go bad)"})
		return out, err
	}
	for _, node := range slices.Sorted(maps.Keys(wave)) {
		if msg := restored(s.hostsDir(node), node, wave[node]); msg != "" {
			out = append(out, monitor.Violation{At: time.Now(), Invariant: InvRollbackRestores, Key: "node/" + node, Message: msg})
		}
	}
	return out, err
}

// hostsDir is node's directory (hostFaults set s.sim from the Env).
func (s *k3osRollback) hostsDir(node string) string { return s.sim.Env.NodeDir(node) }

// restored says how node (its files in dir) is not back on want: its last
// boot and what it would boot next must both be want, rootfs and kernel.
func restored(dir, node, want string) string {
	host, err := hostcheck.ReadHost(node, dir)
	if err != nil {
		return err.Error()
	}
	b, ok := host.Booted()
	if !ok {
		return node + " never booted"
	}
	if b.Rootfs != want || !strings.HasSuffix(b.Kernel, want) {
		return fmt.Sprintf("%s booted %s after its wave's rollback, not its previous %s", node, b.Versions, want)
	}
	if host.Next.Rootfs != want || !strings.HasSuffix(host.Next.Kernel, want) {
		return fmt.Sprintf("%s would boot %s next after its wave's rollback, not its previous %s", node, host.Next, want)
	}
	return ""
}
