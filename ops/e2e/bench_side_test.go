package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/e2e/benchside"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/testenv"
)

// BenchmarkSideNoop is slipway's half of the no-op side by side with
// system-upgrade-controller (scripts/bench-suc, ops/e2e/suc): the channel
// moves every node to v2 at concurrency 10 with the host times the
// environment sets (the script: upgrade, rebootDelay and reboot all 0 s),
// slot-bound (no staging ahead), and prints one benchside result line.
//
//	SLIPWAY_BENCH_UPGRADE=0s SLIPWAY_BENCH_REBOOT_DELAY=0s SLIPWAY_BENCH_REBOOT=0s \
//	  go test ./ops/e2e -run '^$' -bench SideNoop -benchtime 1x
func BenchmarkSideNoop(b *testing.B) {
	c := setup(b)
	get := benchChannel(b, c, "side", v1.UpdateChannelSpec{URL: "file://" + mirror, Prestage: &v1.PrestageSpec{Concurrency: new(0)}})
	settings := fmt.Sprintf("concurrency %d, no-op channel: upgrade %s, rebootDelay %s, reboot %s, slot-bound staging",
		benchConcurrency, benchUpgrade, benchRebootDelay, benchReboot)
	floor := benchside.Floor(benchside.Shape{Nodes: nodes, Concurrency: benchConcurrency, Slot: benchUpgrade + benchRebootDelay + benchReboot})
	sideMeasure(b, c, get, "noop", settings, floor)
}

// BenchmarkSideStaged is slipway's half of the realistic-time side by
// side: every download from the slow mirror takes benchStage, the nodes
// stage ahead of their slot (the default prestage), reboots take
// benchReboot (the script: 30 s and 20 s, rebootDelay 0 s).
func BenchmarkSideStaged(b *testing.B) {
	c := setup(b)
	slow, err := startSlowMirror(mirror, benchStage)
	if err != nil {
		b.Fatal(err)
	}
	defer slow.close()
	get := benchChannel(b, c, "side", v1.UpdateChannelSpec{URL: slow.url})
	settings := fmt.Sprintf("concurrency %d, staging %s per node ahead of the slot (default prestage), upgrade %s, rebootDelay %s, reboot %s",
		benchConcurrency, benchStage, benchUpgrade, benchRebootDelay, benchReboot)
	stageAtOnce := plan.PrestageLimit(plan.Settings{Prestage: plan.PrestageAuto, Concurrency: benchConcurrency}, nodes)
	floor := benchside.Floor(benchside.Shape{Nodes: nodes, Concurrency: benchConcurrency, Stage: benchStage, StageAtOnce: stageAtOnce,
		Slot: benchUpgrade + benchRebootDelay + benchReboot})
	sideMeasure(b, c, get, "staged", settings, floor)
}

// sideKeys names slipway's writers in the result line.
var sideKeys = map[string]string{writerSlipway: "slipway", writerHeartbeat: "slipway_heartbeat_leases",
	writerJobs: "jobs", writerNode: "node", writerOther: "other"}

// sideMeasure patches the channel to v2, waits until every node runs it
// and reports the result line (floor: the shape's physical floor), with the CPU and memory of slipway's
// processes (the agents and the controller, which holds the fleet duties)
// sampled while the rollout runs.
func sideMeasure(b *testing.B, c clients, get func() *v1.UpdateChannel, shape, settings string, floor time.Duration) {
	ctx := context.Background()
	pids := env.Pids()
	ctrl := controllerPids()
	agents := benchside.Track(func() []int { // slipway's processes: the agents and the controller
		return append(benchside.Pids(func(argv []string) bool { _, ok := ourAgent(argv); return ok }), ctrl...)
	}, 500*time.Millisecond)
	kcm := benchside.Track(func() []int { return []int{pids["kube-controller-manager"]} }, time.Second)
	api := benchside.Track(func() []int { return []int{pids["kube-apiserver"]} }, time.Second)
	watchBefore, err := benchside.ScrapeWatch(ctx, c.kube)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	machine := benchside.SampleMachine(250 * time.Millisecond) // every core busy: the steps wait their turn
	start := time.Now()
	patched, err := c.ops.OpsV1().UpdateChannels(ns).Patch(ctx, "side", "application/merge-patch+json", []byte(`{"spec":{"version":"v2"}}`), metav1.PatchOptions{})
	if err != nil {
		b.Fatal(err)
	}
	waitUntil(b, 60*time.Minute, "every node at v2", func() (bool, error) {
		ch := get()
		return ch.Status.ObservedGeneration >= patched.Generation && ch.Status.Counts.UpToDate == nodes && len(ch.Status.Updating) == 0, nil
	})
	wall := time.Since(start)
	machineCPU := machine.Stop()
	b.StopTimer()
	watchAfter, err := benchside.ScrapeWatch(ctx, c.kube)
	if err != nil {
		b.Fatal(err)
	}
	for _, t := range []*benchside.Tracker{agents, kcm, api} {
		t.Stop()
	}
	r := benchside.Result{Contender: "slipway", Shape: shape, Nodes: nodes, Wall: wall, Controller: agents.Usage(), KCM: kcm.Usage(), APIServer: api.Usage(),
		Watch: watchAfter.Since(watchBefore), Load: benchside.LoadAverage(), Settings: settings, Floor: floor, Machine: machineCPU}
	time.Sleep(2 * time.Second) // the apiserver writes its audit log in batches, at least every second
	events, err := testenv.ReadAudit(auditLog)
	if err != nil {
		b.Fatal(err)
	}
	keepAudit(b, start)
	report := countWrites(events, start, start.Add(wall))
	r.Writes = map[string]float64{}
	for w, k := range sideKeys {
		r.Writes[k] = float64(report.byWriter[w]) / float64(nodes)
	}
	r.Own = float64(report.byWriter[writerSlipway]+report.byWriter[writerJobs]) / float64(nodes)
	r.JobController = benchside.PaceOf(benchside.JobControllerWrites(events), start, start.Add(wall), benchside.ControllerManagerLimit(kcmQPS))
	b.ReportMetric(wall.Seconds(), "wall-s")
	b.ReportMetric(r.Own, "writes-slipway+jobs/node")
	b.Log(r.Summary())
	for _, l := range report.lines(nodes) {
		b.Log(l)
	}
	b.Log(timelineLine(timeline(events, env.Nodes)))
	for _, l := range slotTable(events, env.Nodes, start, benchConcurrency) {
		b.Log(l)
	}
	fmt.Println(r.Line())
}

// keepAudit copies the run's audit log to $SLIPWAY_BENCH_KEEP_AUDIT, when
// set, for a closer look at a rollout than the timeline gives; the
// rollout started at start.
func keepAudit(b *testing.B, start time.Time) {
	to := os.Getenv("SLIPWAY_BENCH_KEEP_AUDIT")
	if to == "" {
		return
	}
	data, err := os.ReadFile(auditLog)
	if err == nil {
		err = os.WriteFile(to, data, 0o644)
	}
	if err != nil {
		b.Fatalf("keep the audit log: %v", err)
	}
	b.Logf("audit log kept in %s; the rollout started at %s", to, start.UTC().Format(time.RFC3339Nano))
}

// controllerPids is the running controller's process id, if any.
func controllerPids() []int {
	controllerProc.Lock()
	defer controllerProc.Unlock()
	if controllerProc.cmd == nil || controllerProc.cmd.Process == nil {
		return nil
	}
	return []int{controllerProc.cmd.Process.Pid}
}
