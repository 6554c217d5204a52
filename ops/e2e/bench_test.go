package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"slipway.dev/slipway/ops/agentmem"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/ops/testenv"
)

// The benchmark's fixed simulated per-node time: the upgrade Job's real
// `slipway ops upgrade` is padded to benchUpgrade, the agent waits
// benchRebootDelay after the drain (the product's default rebootDelay), then
// the simulated reboot keeps the node down benchReboot. A real node takes
// minutes for each; SLIPWAY_BENCH_UPGRADE, SLIPWAY_BENCH_REBOOT_DELAY and
// SLIPWAY_BENCH_REBOOT (Go durations) change them. The agents use the
// default Lease duration.
var (
	benchUpgrade     = envDuration("SLIPWAY_BENCH_UPGRADE", 5*time.Second)
	benchRebootDelay = envDuration("SLIPWAY_BENCH_REBOOT_DELAY", 5*time.Second)
	benchReboot      = envDuration("SLIPWAY_BENCH_REBOOT", 10*time.Second)
)

const (
	benchConcurrency = 10
	benchLease       = "15s"
)

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d >= 0 {
		return d
	}
	return def
}

// BenchmarkRollout rolls v2 through every fake node (100 by default) at
// concurrency 10 and reports the wall time against the ideal
// ceil(N/C) x per-node time, the API writes per node upgraded (from the
// apiserver's /metrics), status-write conflicts per slot and agent memory.
//
//	go test ./ops/e2e -run '^$' -bench Rollout -benchtime 1x
func BenchmarkRollout(b *testing.B) {
	c := setup(b)
	ctx := context.Background()
	get := benchChannel(b, c, "bench", v1.UpdateChannelSpec{URL: "file://" + mirror,
		Prestage: &v1.PrestageSpec{Concurrency: new(0)}}) // the slot-bound path; BenchmarkRolloutStaged measures staging ahead
	idleRSS, idleSplit := agentRSS(), splitSummary()
	before, err := scrapeWrites(ctx, c.kube)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	patch := `{"spec":{"version":"v2"}}`
	patched, err := c.ops.OpsV1().UpdateChannels(ns).Patch(ctx, "bench", "application/merge-patch+json", []byte(patch), metav1.PatchOptions{})
	if err != nil {
		b.Fatal(err)
	}
	waitUntil(b, 30*time.Minute, "every node at v2", func() (bool, error) {
		ch := get()
		return ch.Status.ObservedGeneration >= patched.Generation && ch.Status.Counts.UpToDate == nodes && len(ch.Status.Updating) == 0, nil
	})
	wall := time.Since(start)
	b.StopTimer()
	after, err := scrapeWrites(ctx, c.kube)
	if err != nil {
		b.Fatal(err)
	}
	perNode := benchUpgrade + benchRebootDelay + benchReboot
	waves := (nodes + benchConcurrency - 1) / benchConcurrency
	ideal := time.Duration(waves) * perNode
	all, hb, conflicts := after.all-before.all, after.heartbeats-before.heartbeats, after.conflicts-before.conflicts
	b.ReportMetric(wall.Seconds(), "wall-s")
	b.ReportMetric(ideal.Seconds(), "ideal-s")
	b.ReportMetric(wall.Seconds()/ideal.Seconds(), "wall/ideal")
	b.ReportMetric(all/float64(nodes), "writes/node")
	b.ReportMetric((all-hb)/float64(nodes), "writes-excl-heartbeats/node")
	b.ReportMetric(conflicts/float64(nodes), "conflicts/slot")
	b.Logf("%d nodes, concurrency %d, per-node simulated time %s (upgrade %s + rebootDelay %s + reboot %s): wall %s, ideal %s (x%.2f)",
		nodes, benchConcurrency, perNode, benchUpgrade, benchRebootDelay, benchReboot, wall.Round(time.Second), ideal, wall.Seconds()/ideal.Seconds())
	b.Logf("API writes during the rollout: %.0f (%.1f per node), of which %.0f Lease/node-status heartbeats; %.0f status conflicts for %d slots",
		all, all/float64(nodes), hb, conflicts, nodes)
	time.Sleep(2 * time.Second) // the apiserver writes its audit log in batches, at least every second
	if events, err := testenv.ReadAudit(auditLog); err != nil {
		b.Error(err)
	} else {
		report := countWrites(events, start, start.Add(wall))
		b.ReportMetric(float64(report.byWriter[writerSlipway]+report.byWriter[writerJobs])/float64(nodes), "writes-slipway+jobs/node")
		for _, l := range report.lines(nodes) {
			b.Log(l)
		}
		b.Log(timelineLine(timeline(events, env.Nodes)))
	}
	b.Logf("Events per node by reason: %s", eventReasons(ctx, b, c.kube, nodes))
	b.Logf("agent RSS before the rollout: %s; %s", rssSummary(idleRSS), idleSplit)
	b.Logf("agent RSS after the rollout:  %s; %s", rssSummary(agentRSS()), splitSummary())
	if benchSettle > 0 {
		time.Sleep(benchSettle)
		b.Logf("agent RSS %s after it:      %s; %s", benchSettle, rssSummary(agentRSS()), splitSummary())
	}
}

// benchAgentEnv is SLIPWAY_BENCH_AGENT_ENV (space-separated NAME=VALUE) for
// the agents' environment: e.g. "GOMAXPROCS=4" or "GOGC=50", to measure
// what a runtime setting does to their memory.
func benchAgentEnv() []string { return strings.Fields(os.Getenv("SLIPWAY_BENCH_AGENT_ENV")) }

// splitSummary is the agents' anonymous memory and PSS (median and
// largest, MiB) from /proc/PID/smaps_rollup, with the agents' environment
// as set. The agents share one binary here, so the file part of their PSS
// is divided among them; on a node the agent is the binary's only user
// and its PSS is its RSS (docs/agent.md, Memory).
func splitSummary() string {
	var anon, pss []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmd, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		if _, ok := ourAgent(strings.Split(string(cmd), "\x00")); !ok {
			continue
		}
		s, err := agentmem.ReadSplit(filepath.Base(d))
		if err != nil {
			continue
		}
		anon, pss = append(anon, s.Anon), append(pss, s.PSS)
	}
	if len(anon) == 0 {
		return "no agent's memory read"
	}
	slices.Sort(anon)
	slices.Sort(pss)
	mib := func(k int) float64 { return float64(k) / 1024 }
	return fmt.Sprintf("anonymous median %.1f max %.1f MiB, PSS median %.1f max %.1f MiB (agent env %q)",
		mib(anon[len(anon)/2]), mib(anon[len(anon)-1]), mib(pss[len(pss)/2]), mib(pss[len(pss)-1]), strings.Join(benchAgentEnv(), " "))
}

// benchSettle is how long after the rollout the agents' memory is read
// again: settled, every agent idle for at least this long.
var benchSettle = envDuration("SLIPWAY_BENCH_SETTLE", 75*time.Second)

// benchChannel creates the benchmark's channel (at v1, concurrency 10,
// rebootDelay as set, the rest of spec as given), waits until every agent
// reports v1, and returns a getter of the channel.
func benchChannel(b *testing.B, c clients, name string, spec v1.UpdateChannelSpec) func() *v1.UpdateChannel {
	ctx := context.Background()
	spec.Version, spec.Concurrency = "v1", benchConcurrency
	spec.RebootDelay = &metav1.Duration{Duration: benchRebootDelay}
	ch := &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
	if _, err := c.ops.OpsV1().UpdateChannels(ns).Create(ctx, ch, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	get := func() *v1.UpdateChannel {
		ch, err := c.ops.OpsV1().UpdateChannels(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		return ch
	}
	waitUntil(b, 5*time.Minute, "every agent to report v1", func() (bool, error) {
		ch := get()
		return ch.Status.Counts.Nodes == nodes && ch.Status.Counts.UpToDate == nodes, nil
	})
	// The channel's views of v1 belong to its creation, not to the
	// rollout measured next: wait until the controller has written them all,
	// in the NodeUpdates, and the install's switch-over is done: a fresh
	// agent reports on its Node until it announces that it reads its
	// NodeUpdate; then it and the controller take what moved off the Node
	// (installNodeWritesDone). Those writes are the install's, not the rollout's.
	uid := get().UID
	waitUntil(b, 5*time.Minute, "every node to carry the channel's view in its NodeUpdate, nothing of it left on the Node", func() (bool, error) {
		list, err := c.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		objs, err := c.ops.OpsV1().NodeUpdates(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		byNode := map[string]*v1.NodeUpdate{}
		for i := range objs.Items {
			byNode[objs.Items[i].Name] = &objs.Items[i]
		}
		with := 0
		for _, n := range list.Items { // where its agent reads them
			u := byNode[n.Name]
			if u == nil {
				continue
			}
			if _, ok := protocol.ViewsOfSpec(u.Spec, ns)[uid]; ok && installNodeWritesDone(n.Annotations) {
				with++
			}
		}
		return with >= nodes, nil
	})
	return get
}

// installNodeWritesDone tells whether a Node carries nothing the
// switch-over to its NodeUpdate takes off it: no channel view, no report or
// reboot record of its agent.
func installNodeWritesDone(annotations map[string]string) bool {
	if len(protocol.ViewsOf(annotations, ns, func(string, error) {})) > 0 {
		return false
	}
	for _, k := range protocol.MovedToNodeUpdate {
		if _, ok := annotations[k]; ok {
			return false
		}
	}
	return true
}

// eventReasons counts the slipway agents' Events in the namespace by reason, per node.
func eventReasons(ctx context.Context, b *testing.B, c kubernetes.Interface, nodes int) string {
	list, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "source=slipway-agent"})
	if err != nil {
		b.Error(err)
		return ""
	}
	counts := map[string]int32{}
	for _, e := range list.Items {
		counts[e.Reason] += max(e.Count, 1)
	}
	var parts []string
	for r, n := range counts {
		parts = append(parts, fmt.Sprintf("%s %.2f", r, float64(n)/float64(nodes)))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}
