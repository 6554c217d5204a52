package scale

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
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
// before the window opens: the controller's and the agents' start-up
// writes are over.
const restSettle = 30 * time.Second

// restProcs are the processes whose CPU the window measures, by the name
// the figures give them.
type restProcs map[string]func() []int

// measureRest measures the fleet at rest for restWindow: the CPU share of
// each of procs, the API server's requests a second (with and without
// Leases) and the bytes a second it sent on watches, by resource. Returns
// the figures as key=value pairs, rest_ first.
func measureRest(b *testing.B, ctx context.Context, kube kubernetes.Interface, procs restProcs) []string {
	if restWindow <= 0 {
		return nil
	}
	time.Sleep(restSettle)
	usage := map[string]*procUsage{}
	for name, find := range procs {
		usage[name] = sample(find, 2*time.Second)
	}
	reqBefore, err := scrapeRequests(ctx, kube)
	if err != nil {
		b.Fatal(err)
	}
	watchBefore, err := benchside.ScrapeWatch(ctx, kube)
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	stopProfiles := profileRest(b, ctx, kube)
	time.Sleep(restWindow)
	stopProfiles()
	secs := time.Since(t0).Seconds()
	reqAfter, err := scrapeRequests(ctx, kube)
	if err != nil {
		b.Fatal(err)
	}
	watchAfter, err := benchside.ScrapeWatch(ctx, kube)
	if err != nil {
		b.Fatal(err)
	}
	kv := []string{fmt.Sprintf("rest_s=%.0f", secs)}
	names := make([]string, 0, len(usage))
	for name := range usage {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		cpu, _, _, _, _ := usage[name].end()
		kv = append(kv, fmt.Sprintf("rest_%s_cpu_pct=%.1f", name, 100*cpu.Seconds()/secs))
	}
	writes, reads, writesNL, readsNL := reqAfter.since(reqBefore)
	kv = append(kv, fmt.Sprintf("rest_writes_per_s=%.1f", writes/secs), fmt.Sprintf("rest_writes_nolease_per_s=%.1f", writesNL/secs),
		fmt.Sprintf("rest_reads_per_s=%.1f", reads/secs), fmt.Sprintf("rest_reads_nolease_per_s=%.1f", readsNL/secs))
	watch := watchAfter.Since(watchBefore)
	kv = append(kv, fmt.Sprintf("rest_watch_kib_per_s=%.1f", watch.Total().Bytes/1024/secs))
	for _, r := range restResources(watch) {
		kv = append(kv, fmt.Sprintf("rest_watchres_%s_kib_per_s=%.1f", strings.ReplaceAll(strings.TrimPrefix(r, "/"), "/", "."), watch[r].Bytes/1024/secs))
	}
	b.Logf("at rest for %.0f s: %s", secs, strings.Join(kv, " "))
	return kv
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

// restProfiles is where the window's CPU profiles go
// (SLIPWAY_SCALE_REST_PROFILE, a directory; "" takes none): this
// process's (the stand-ins', standins.pprof) and kube-apiserver's
// (apiserver.pprof), for go tool pprof.
var restProfiles = os.Getenv("SLIPWAY_SCALE_REST_PROFILE")

// profileRest starts the window's CPU profiles; the function it returns
// ends them and writes them out.
func profileRest(b *testing.B, ctx context.Context, kube kubernetes.Interface) func() {
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
	api := make(chan []byte, 1)
	go func() {
		body, err := kube.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(int(restWindow.Seconds()))).Timeout(restWindow + time.Minute).DoRaw(ctx)
		if err != nil {
			b.Logf("kube-apiserver's CPU profile: %v", err)
		}
		api <- body
	}()
	return func() {
		pprof.StopCPUProfile()
		self.Close()
		if body := <-api; len(body) > 0 {
			if err := os.WriteFile(filepath.Join(restProfiles, "apiserver.pprof"), body, 0o644); err != nil {
				b.Logf("write kube-apiserver's CPU profile: %v", err)
			}
		}
		b.Logf("CPU profiles at rest in %s", restProfiles)
	}
}

// selfPid is this process: the stand-ins run in it.
func selfPid() []int { return []int{os.Getpid()} }
