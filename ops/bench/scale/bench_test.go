package scale

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"slipway.dev/slipway/ops/agent"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/bench/sucproc"
	"slipway.dev/slipway/ops/e2e/benchside"
	"slipway.dev/slipway/ops/generated/clientset/versioned"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/testenv/standin"
)

// BenchmarkScaleNoop is one no-op rollout of SLIPWAY_SCALE_NODES nodes at
// concurrency 10 by SLIPWAY_SCALE_CONTENDER (slipway: the channel moves
// to v2 with zero host time, as ops/e2e's BenchmarkSideNoop; suc: the
// no-op plan of ops/e2e/suc) on a fresh cluster, and prints its SCALE line.
//
//	SLIPWAY_SCALE_NODES=1000 SLIPWAY_SCALE_CONTENDER=slipway go test ./ops/bench/scale -run '^$' -bench ScaleNoop -benchtime 1x
func BenchmarkScaleNoop(b *testing.B) {
	e := testenv.Need(b, env)
	ctx := context.Background()
	kube := kubernetes.NewForConfigOrDie(e.Config)
	watcher, err := watchNodes(e.Config)
	if err != nil {
		b.Fatal(err)
	}
	defer close(watcher.stop)
	// The cluster is steady before the contender starts: every node Ready
	// and without the not-ready taint (at thousands of nodes the node
	// lifecycle controller lifts it minutes after Ready).
	waitFor(b, 30*time.Minute, "every node Ready and untainted", func() (bool, error) {
		tainted := watcher.notReadyTainted()
		return tainted == 0, fmt.Errorf("%d nodes still tainted not-ready", tainted)
	})
	labelRolled(b, kube)
	pids := e.Pids()
	var own func() []int // the contender's controller
	var others func() []int
	var start func() // makes the change
	var done func() (bool, error)
	restartsOf := func() int { return 0 }
	settings := fmt.Sprintf("%d nodes, concurrency %d, kube-controller-manager and kube-scheduler at their defaults", nodes, concurrency)
	if rolled < nodes {
		settings = fmt.Sprintf("%d of %d nodes rolled (the others idle; slipway's agents run on them all the same), concurrency %d, kube-controller-manager and kube-scheduler at their defaults", rolled, nodes, concurrency)
	}
	if nodeLease > 40 {
		settings += fmt.Sprintf(" but the node monitor grace period (%d s: the nodes' Leases last %d s, renewed every %d s)", nodeLease*5/4, nodeLease, nodeLease/4)
	}
	switch contender {
	case "suc":
		pid := startSUC(b, e)
		own = func() []int { return []int{pid} }
		plan := "no-op plan: kubectl cordon, nothing, uncordon by SUC"
		if sucReboot {
			plan = "reboot plan: kubectl cordon, a simulated reboot at 0 s downtime that the pod waits through (slipway-sim reboot --wait), uncordon by SUC"
		}
		settings += ", SUC with its manifest's settings (2 threads, leader election, client-go limits of its own), " + plan
		dyn := dynClient(e)
		start = func() {
			if _, err := dyn.Resource(sucproc.PlanGVR).Namespace(sucproc.Namespace).Create(ctx, sucPlan(), metav1.CreateOptions{}); err != nil {
				b.Fatalf("create the plan: %v", err)
			}
		}
		done = sucDone(ctx, e, watcher)
	case "slipway":
		fleet := startStandIns(b, e)
		defer fleet.Stop()
		restartsOf = fleet.Restarts
		own = func() []int { return []int{controllerPid()} }
		others = func() []int { // this cluster's only: other clusters on the machine run agents too
			return benchside.Pids(func(argv []string) bool { return isAgent(argv) && slices.ContainsFunc(argv, underRoot(e.NodesRoot)) })
		}
		settings += fmt.Sprintf(", slipway controller QPS 50 burst 100 (its defaults), %d real agent processes (every %dth node) and %d in-process stand-ins, "+
			"lease %s, resync %s, work watch linger %s; no-op channel: upgrade, rebootDelay, reboot 0 s, slot-bound staging",
			nodes-len(standNodes), realEvery, len(standNodes), lease, resync, workLinger)
		ops := versioned.NewForConfigOrDie(e.Config)
		createChannel(b, ops, kube)
		var gen int64
		start = func() {
			patched, err := ops.OpsV1().UpdateChannels(ns).Patch(ctx, "scale", "application/merge-patch+json", []byte(`{"spec":{"version":"v2"}}`), metav1.PatchOptions{})
			if err != nil {
				b.Fatal(err)
			}
			gen = patched.Generation
		}
		done = func() (bool, error) {
			ch, err := ops.OpsV1().UpdateChannels(ns).Get(ctx, "scale", metav1.GetOptions{})
			if err != nil { // an API server this busy may refuse a read (429): ask again
				return false, err
			}
			if errs := fleet.Errors(); len(errs) > 0 {
				b.Fatalf("stand-ins failed: %v", errs)
			}
			return ch.Status.ObservedGeneration >= gen && ch.Status.Counts.UpToDate == rolled && len(ch.Status.Updating) == 0,
				fmt.Errorf("%d of %d up to date, %d slots", ch.Status.Counts.UpToDate, rolled, len(ch.Status.Updating))
		}
	}
	rest := restProcs{"apiserver": func() []int { return []int{pids["kube-apiserver"]} }, "controller": own}
	if contender == "slipway" {
		rest["standins"], rest["agents"] = selfPid, others
	}
	restKV := measureRest(b, ctx, kube, rest, watcher)
	var mon *monitorProc
	if withMonitor && contender == "slipway" {
		if mon, err = startMonitor(e, b.TempDir()); err != nil {
			b.Fatal(err)
		}
		settings += "; the invariant monitor's process beside it (SLIPWAY_BENCH_MONITOR=1; its requests and watches count in the figures)"
	}
	nodeBefore, contBefore := watcher.nodeBytes(), watcher.contenderBytes()
	ctl := sample(own, 2*time.Second)
	api := sample(func() []int { return []int{pids["kube-apiserver"]} }, 2*time.Second)
	kcm := sample(func() []int { return []int{pids["kube-controller-manager"]} }, 2*time.Second)
	// The stand-ins' memory every 20 s: at thousands of agents, reading it
	// every 2 s was a fifth of their process's CPU at rest.
	self := sampleMem(selfPid, 2*time.Second, 10)
	var agents *procUsage
	if others != nil {
		agents = sample(others, 2*time.Second)
	}
	loadBefore := benchside.LoadAverage()
	before := scrapeCounters(b, ctx, kube)
	wBytes0, wEvents0 := watcher.received()
	rBytes0, rEvents0 := watcher.receivedOnRolled()
	writers0 := watcher.writers()
	profiled := profileRollout(b, kube)
	b.ResetTimer()
	t0 := time.Now()
	start()
	waitFor(b, 4*time.Hour, "every node done", done)
	wall := time.Since(t0)
	b.StopTimer()
	var monKV []string
	if mon != nil {
		monKV = mon.stop(b.Logf)
	}
	wBytes1, wEvents1 := watcher.received()
	rBytes1, rEvents1 := watcher.receivedOnRolled()
	after := scrapeCounters(b, ctx, kube)
	n := float64(rolled) // per node upgraded
	writes, reads, writesNL, readsNL := after.req.since(before.req)
	ctlCPU, ctlRSS, ctlAnon, ctlPSS, _ := ctl.end()
	apiCPU, apiRSS, _, _, _ := api.end()
	kcmCPU, _, _, _, _ := kcm.end()
	selfCPU, selfRSS, selfAnon, _, _ := self.end()
	watch := after.watch.Since(before.watch)
	kv := []string{"contender=" + contender, "nodes=" + fmt.Sprint(nodes), "rolled=" + fmt.Sprint(rolled), fmt.Sprintf("wall_s=%.1f", wall.Seconds()),
		fmt.Sprintf("writes_per_node=%.1f", writes/n), fmt.Sprintf("reads_per_node=%.1f", reads/n),
		fmt.Sprintf("writes_nolease_per_node=%.1f", writesNL/n), fmt.Sprintf("reads_nolease_per_node=%.1f", readsNL/n),
		fmt.Sprintf("watch_mib=%.1f", watch.Total().Bytes/(1<<20)), fmt.Sprintf("watch_events=%.0f", watch.Total().Events)}
	var resources []string
	for r := range watch {
		if watch[r].Bytes >= 1<<16 {
			resources = append(resources, r)
		}
	}
	slices.Sort(resources)
	for _, r := range resources {
		kv = append(kv, fmt.Sprintf("watchres_%s_mib=%.1f", strings.ReplaceAll(strings.TrimPrefix(r, "/"), "/", "."), watch[r].Bytes/(1<<20)))
	}
	kv = append(kv, fmt.Sprintf("controller_cpu_s=%.1f", ctlCPU.Seconds()), fmt.Sprintf("controller_rss_mib=%.1f", ctlRSS),
		fmt.Sprintf("controller_anon_mib=%.1f", ctlAnon), fmt.Sprintf("controller_pss_mib=%.1f", ctlPSS),
		fmt.Sprintf("apiserver_cpu_s=%.1f", apiCPU.Seconds()), fmt.Sprintf("apiserver_rss_mib=%.0f", apiRSS), fmt.Sprintf("kcm_cpu_s=%.1f", kcmCPU.Seconds()),
		fmt.Sprintf("nodewatcher_mib=%.1f", float64(wBytes1-wBytes0)/(1<<20)), fmt.Sprintf("nodewatcher_events=%d", wEvents1-wEvents0),
		fmt.Sprintf("nodewatcher_rolled_json_mib=%.1f", float64(rBytes1-rBytes0)/(1<<20)), fmt.Sprintf("nodewatcher_rolled_events=%d", rEvents1-rEvents0),
		fmt.Sprintf("node_bytes_before=%.0f", nodeBefore), fmt.Sprintf("node_bytes_after=%.0f", watcher.nodeBytes()),
		fmt.Sprintf("node_contender_bytes_before=%.0f", contBefore), fmt.Sprintf("node_contender_bytes_after=%.0f", watcher.contenderBytes()),
		"nodewatcher_by_writer="+writersSince(writers0, watcher.writers()))
	kv = append(kv, rolloutNodeWatchers(watch["/nodes"].Events, wEvents1-wEvents0, after.churn.since(before.churn))...)
	if agents != nil {
		aCPU, aRSS, aAnon, aPSS, aN := agents.end()
		kv = append(kv, fmt.Sprintf("real_agents=%d", aN), fmt.Sprintf("real_agents_cpu_s=%.1f", aCPU.Seconds()),
			fmt.Sprintf("real_agent_rss_mib=%.1f", aRSS/float64(max(aN, 1))), fmt.Sprintf("real_agent_anon_mib=%.1f", aAnon/float64(max(aN, 1))),
			fmt.Sprintf("real_agent_pss_mib=%.1f", aPSS/float64(max(aN, 1))),
			fmt.Sprintf("standin_restarts=%d", restartsOf()),
			fmt.Sprintf("standin_process_cpu_s=%.1f", selfCPU.Seconds()), fmt.Sprintf("standin_process_rss_mib=%.0f", selfRSS), fmt.Sprintf("standin_process_anon_mib=%.0f", selfAnon))
	}
	kv = append(kv, monKV...)
	if withAudit {
		kv = append(kv, auditedRequests(b, e, t0, t0.Add(wall))...)
	}
	kv = append(kv, restKV...)
	kv = append(kv, "load_before="+strings.ReplaceAll(loadBefore, " ", "/"), "load_after="+strings.ReplaceAll(benchside.LoadAverage(), " ", "/"),
		"settings="+strings.ReplaceAll(settings, " ", "_"))
	profiled() // after the window's figures: a profile longer than the rollout is waited for here
	b.ReportMetric(wall.Seconds(), "wall-s")
	b.Logf("sent on watches: %s", watch.String())
	fmt.Println("SCALE " + strings.Join(kv, " "))
}

// isAgent tells a real agent process (`slipway ops agent`) from its argv.
func isAgent(argv []string) bool {
	return len(argv) >= 3 && filepath.Base(argv[0]) == "slipway" && argv[1] == "ops" && argv[2] == "agent"
}

// underRoot tells an argument naming a path under root.
func underRoot(root string) func(string) bool {
	return func(arg string) bool { return strings.HasPrefix(arg, root+string(filepath.Separator)) }
}

// startStandIns runs the real agent code in this process for every node
// without an agent process.
func startStandIns(b *testing.B, e *testenv.Env) *standin.Fleet {
	logf, err := os.Create(filepath.Join(e.Dir, "standin.log"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { logf.Close() })
	log := slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	t0 := time.Now()
	fleet, err := standin.Start(context.Background(), standin.Options{
		Kubeconfig: e.Kubeconfig, Identity: agentIdentity, Supervisor: e.Supervisor, Nodes: standNodes, NodesRoot: e.NodesRoot,
		Slipway: filepath.Join(binDir, "slipway"), Mirror: mirror, Install: "v1", Log: log,
		Agent: agent.Options{Namespace: ns, HostSystemDir: "/k3os/system", HostLockDir: "/run/k3os", Image: "slipway:e2e",
			UpgradeCommand: []string{"slipway"}, Resync: mustDuration(resync), LeaseDuration: mustDuration(lease), WorkWatchLinger: mustDuration(workLinger),
			Retry: plan.Retry{Base: time.Hour, Max: plan.DefaultRetry.Max}, Log: log},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%d stand-ins installed and started in %s", len(standNodes), time.Since(t0).Round(time.Second))
	return fleet
}

func mustDuration(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return d
}

// createChannel creates the channel at v1 (concurrency 10, rebootDelay 0,
// slot-bound staging), waits until every node reports v1 and carries its
// view.
func createChannel(b *testing.B, ops versioned.Interface, kube kubernetes.Interface) {
	ctx := context.Background()
	ch := &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "scale", Namespace: ns}, Spec: v1.UpdateChannelSpec{
		URL: "file://" + mirror, Version: "v1", Concurrency: concurrency, RebootDelay: &metav1.Duration{},
		Prestage: &v1.PrestageSpec{Concurrency: new(0)}}}
	if rolled < nodes {
		ch.Spec.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: rollLabel, Operator: metav1.LabelSelectorOpExists}}}
	}
	if _, err := ops.OpsV1().UpdateChannels(ns).Create(ctx, ch, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	var uid types.UID
	waitFor(b, 60*time.Minute, "every agent to report v1", func() (bool, error) {
		ch, err := ops.OpsV1().UpdateChannels(ns).Get(ctx, "scale", metav1.GetOptions{})
		if err != nil { // an API server this busy may refuse a read (429): ask again
			return false, err
		}
		uid = ch.UID
		return ch.Status.Counts.Nodes == rolled && ch.Status.Counts.UpToDate == rolled, fmt.Errorf("%d nodes, %d at v1", ch.Status.Counts.Nodes, ch.Status.Counts.UpToDate)
	})
	waitFor(b, 30*time.Minute, "every node to carry the channel's view", func() (bool, error) {
		list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, err
		}
		objs, err := ops.OpsV1().NodeUpdates(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, err
		}
		byNode := map[string]*v1.NodeUpdate{}
		for i := range objs.Items {
			byNode[objs.Items[i].Name] = &objs.Items[i]
		}
		with := 0
		for _, n := range list.Items { // where its agent reads them
			if _, ok := protocol.NodeViews(n.Annotations, byNode[n.Name], ns, func(string, error) {})[uid]; ok {
				with++
			}
		}
		return with >= rolled, fmt.Errorf("%d of %d", with, rolled)
	})
}

// labelRolled labels the nodes the rollout moves when it moves only some:
// node-1 to node-<rolled> (the real agent processes' sample among them).
func labelRolled(b *testing.B, kube kubernetes.Interface) {
	if rolled == nodes {
		return
	}
	patch := []byte(`{"metadata":{"labels":{"` + rollLabel + `":"true"}}}`)
	for i := 1; i <= rolled; i++ {
		name := fmt.Sprintf("node-%d", i)
		if _, err := kube.CoreV1().Nodes().Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			b.Fatalf("label %s for the rollout: %v", name, err)
		}
	}
}
