package scale

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"slipway.dev/slipway/ops/e2e/benchside"
)

// restWindow is how long the fleet is measured at rest before the change
// (SLIPWAY_SCALE_REST, seconds; 0 skips it): every agent started and
// reporting, the contender's controller idle. What a fleet costs when
// nothing rolls is paid all the time, not per rollout; at 5,000 nodes on
// two cores it is what slows the rollout itself.
var restWindow = time.Duration(envInt("SLIPWAY_SCALE_REST", 120)) * time.Second

// restSettle is how long the fleet settles after the last agent reported
// before the window opens (SLIPWAY_SCALE_REST_SETTLE, seconds): the
// controller's and the agents' start-up writes are over. Past the agents'
// work watch linger (5 min), the window sees an idle agent's watches as a
// fleet at rest has them.
var restSettle = time.Duration(envInt("SLIPWAY_SCALE_REST_SETTLE", 330)) * time.Second

// restProcs are the processes whose CPU the window measures, by the name
// the figures give them.
type restProcs map[string]func() []int

// measureRest measures the fleet at rest for restWindow: the CPU share of
// each of procs, the API server's requests a second (with and without
// Leases) and the bytes a second it sent on watches, by resource. Returns
// the figures as key=value pairs, rest_ first.
func measureRest(b *testing.B, ctx context.Context, kube kubernetes.Interface, procs restProcs, watcher *nodeWatcher) []string {
	if restWindow <= 0 {
		return nil
	}
	time.Sleep(restSettle)
	usage := map[string]*procUsage{}
	for name, find := range procs {
		usage[name] = sampleMem(find, 2*time.Second, 10) // the CPU is what the window reports
	}
	before := scrapeCounters(b, ctx, kube)
	_, watcherBefore := watcher.received()
	t0 := time.Now()
	stopProfiles := profileRest(b)
	time.Sleep(restWindow)
	stopProfiles()
	secs := time.Since(t0).Seconds()
	after := scrapeCounters(b, ctx, kube)
	_, watcherAfter := watcher.received()
	kv := []string{fmt.Sprintf("rest_s=%.0f", secs)}
	names := make([]string, 0, len(usage))
	for name := range usage {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		cpu, _, anon, _, _ := usage[name].end() // the memory: its peak in the window, at rest
		kv = append(kv, fmt.Sprintf("rest_%s_cpu_pct=%.1f", name, 100*cpu.Seconds()/secs), fmt.Sprintf("rest_%s_anon_mib=%.0f", name, anon))
	}
	writes, reads, writesNL, readsNL := after.req.since(before.req)
	kv = append(kv, fmt.Sprintf("rest_writes_per_s=%.1f", writes/secs), fmt.Sprintf("rest_writes_nolease_per_s=%.1f", writesNL/secs),
		fmt.Sprintf("rest_reads_per_s=%.1f", reads/secs), fmt.Sprintf("rest_reads_nolease_per_s=%.1f", readsNL/secs))
	watch := after.watch.Since(before.watch)
	kv = append(kv, fmt.Sprintf("rest_watch_kib_per_s=%.1f", watch.Total().Bytes/1024/secs))
	for _, r := range restResources(watch) {
		kv = append(kv, fmt.Sprintf("rest_watchres_%s_kib_per_s=%.1f", strings.ReplaceAll(strings.TrimPrefix(r, "/"), "/", "."), watch[r].Bytes/1024/secs))
	}
	kv = append(kv, restNodeWatchers(watch["/nodes"].Events, watcherAfter-watcherBefore)...)
	if open, err := scrapeWatches(ctx, kube); err == nil {
		kv = append(kv, fmt.Sprintf("rest_watches=%.0f", open["*"]), fmt.Sprintf("rest_watches_jobs=%.0f", open["jobs"]), fmt.Sprintf("rest_watches_pods=%.0f", open["pods"]))
	}
	b.Logf("at rest for %.0f s: %s", secs, strings.Join(kv, " "))
	return kv
}

// restNodeWatchers says what the Node watches cost at rest independently of
// how many Node writes the window caught (kwok writes the status of nodes
// created together in bursts, which a window catches or misses): the events
// the API server sent on Node watches, those one other watcher of Nodes
// received, and their ratio, the watchers each Node event reached (agents
// that watch their own Node count together as one).
func restNodeWatchers(sent float64, oneWatcher int64) []string {
	kv := []string{fmt.Sprintf("rest_node_watch_events=%.0f", sent), fmt.Sprintf("rest_nodewatcher_events=%d", oneWatcher)}
	if oneWatcher > 0 {
		kv = append(kv, fmt.Sprintf("rest_node_watchers=%.1f", sent/float64(oneWatcher)))
	}
	return kv
}

// rolloutNodeWatchers is the same during the rollout: the events the API
// server sent on Node watches and the watchers each Node event reached (the
// events one other watcher received are nodewatcher_events already). Apart
// from them, the churn: the initial events of Node watches opened in the
// window (a watcher the API server ended as too slow lists again, which is
// one event per Node of the fleet; an agent opening its own Node's watch
// is one), the watchers ended, and the watchers each Node event reached
// without those initial events (node_watchers_steady), which a relist
// does not move.
func rolloutNodeWatchers(sent float64, oneWatcher int64, churn watchChurn) []string {
	kv := []string{fmt.Sprintf("node_watch_events=%.0f", sent), fmt.Sprintf("node_init_events=%.0f", churn.InitEvents),
		fmt.Sprintf("node_watchers_terminated=%.0f", churn.Terminated)}
	if oneWatcher > 0 {
		kv = append(kv, fmt.Sprintf("node_watchers=%.1f", sent/float64(oneWatcher)),
			fmt.Sprintf("node_watchers_steady=%.1f", (sent-churn.InitEvents)/float64(oneWatcher)))
	}
	return kv
}

// counters are the API server's counters the benchmark reads at each end
// of a window: requests, watch traffic, and the Node watches' churn.
type counters struct {
	req   requests
	watch benchside.WatchTraffic
	churn watchChurn
}

// scrapeCounters reads the API server's counters now, from one read of its
// /metrics.
func scrapeCounters(b *testing.B, ctx context.Context, kube kubernetes.Interface) counters {
	body, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		b.Fatalf("read the apiserver's /metrics: %v", err)
	}
	var c counters
	if c.req, err = parseRequests(body); err != nil {
		b.Fatal(err)
	}
	if c.watch, err = benchside.ParseWatch(body); err != nil {
		b.Fatal(err)
	}
	if c.churn, err = parseWatchChurn(body, "nodes"); err != nil {
		b.Fatal(err)
	}
	return c
}

// restResources are the resources that sent at least 1 KiB on watches in
// the window, sorted.
func restResources(w benchside.WatchTraffic) []string {
	var out []string
	for r, sent := range w {
		if sent.Bytes >= 1024 {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// restProfiles is where the window's CPU profile of this process (the
// stand-ins', standins.pprof) goes, for go tool pprof
// (SLIPWAY_SCALE_REST_PROFILE, a directory; "" takes none). The rollout's
// profiles are profileRollout's.
var restProfiles = os.Getenv("SLIPWAY_SCALE_REST_PROFILE")

// profileRest starts the window's CPU profile; the function it returns
// ends it.
func profileRest(b *testing.B) func() {
	if restProfiles == "" {
		return func() {}
	}
	if err := os.MkdirAll(restProfiles, 0o755); err != nil {
		b.Fatal(err)
	}
	self, err := os.Create(filepath.Join(restProfiles, "standins.pprof"))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(self); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		self.Close()
		b.Logf("the stand-ins' CPU profile at rest: %s", self.Name())
	}
}

// selfPid is this process: the stand-ins run in it.
func selfPid() []int { return []int{os.Getpid()} }
