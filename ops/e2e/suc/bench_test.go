package suc

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/e2e/benchside"
	"slipway.dev/slipway/ops/testenv"
)

// The side by side's settings, shared with ops/e2e's slipway side through
// the same environment variables (Go durations).
var (
	benchStage  = envDuration("SLIPWAY_BENCH_STAGE", 30*time.Second)
	benchReboot = envDuration("SLIPWAY_BENCH_REBOOT", 20*time.Second)
)

const benchConcurrency = 10

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d >= 0 {
		return d
	}
	return def
}

// cordon is what SUC's cordon init container runs, here at the start of
// the upgrade container (the executor runs one container per pod).
const cordon = `kubectl cordon "$NODE_NAME" >/dev/null`

// BenchmarkSUCNoop applies a no-op plan (cordon, a Job that does nothing,
// uncordon) to every fake node at concurrency 10.
//
//	SUC_BIN=... go test ./ops/e2e/suc -run '^$' -bench SUCNoop -benchtime 1x
func BenchmarkSUCNoop(b *testing.B) {
	c, pid := startSUC(b)
	settings := fmt.Sprintf("concurrency %d, no-op plan: kubectl cordon, nothing, uncordon by SUC; no reboot", benchConcurrency)
	floor := benchside.Floor(benchside.Shape{Nodes: nodes, Concurrency: benchConcurrency}) // no host time
	measure(b, c, pid, "noop", settings, floor, "noop", plan{name: "noop", concurrency: benchConcurrency, cordon: true, command: []string{"sh", "-c", cordon}})
}

// BenchmarkSUCStaged is SUC's usual two-plan shape at realistic times: a
// prepare plan (no cordon) stages benchStage per node on as many nodes at
// a time as slipway's default prestage (a quarter of the nodes, at least
// twice the concurrency); the upgrade plan, on nodes where prepare completed,
// cordons, reboots the node (down benchReboot) and ends when the node is
// Ready again, at concurrency 10. A real SUC upgrade pod dies with the
// reboot and the Job's next pod finds the node upgraded; here the pod waits
// through the reboot, which spares SUC that second pod.
func BenchmarkSUCStaged(b *testing.B) {
	c, pid := startSUC(b)
	stageConcurrency := max((nodes+3)/4, 2*benchConcurrency) // what slipway's channel stages at once by default
	settings := fmt.Sprintf("concurrency %d, prepare plan %s per node at concurrency %d, upgrade plan: cordon, reboot %s, wait for Ready, uncordon by SUC",
		benchConcurrency, benchStage, stageConcurrency, benchReboot)
	reboot := fmt.Sprintf(`%s && slipway-sim reboot --socket "$SUC_BENCH_SOCKET" --delay %s >/dev/null && `+
		`kubectl wait --for=condition=Ready=false node/"$NODE_NAME" --timeout=10m >/dev/null && `+
		`kubectl wait --for=condition=Ready node/"$NODE_NAME" --timeout=10m >/dev/null`, cordon, benchReboot)
	floor := benchside.Floor(benchside.Shape{Nodes: nodes, Concurrency: benchConcurrency, Stage: benchStage, StageAtOnce: stageConcurrency, Slot: benchReboot})
	measure(b, c, pid, "staged", settings, floor, "upgrade",
		plan{name: "prepare", concurrency: stageConcurrency, command: []string{"slipway-sim", "take", benchStage.String(), "true"}},
		plan{name: "upgrade", concurrency: benchConcurrency, cordon: true, command: []string{"sh", "-c", reboot}, after: "prepare"})
}

// measure creates the plans, waits until the last one named final is done
// on every node, and reports the side-by-side result (floor: the shape's
// physical floor).
func measure(b *testing.B, c clients, pid int, shape, settings string, floor time.Duration, final string, plans ...plan) {
	ctx := context.Background()
	pids := env.Pids()
	ctl := benchside.Track(func() []int { return []int{pid} }, time.Second)
	kcm := benchside.Track(func() []int { return []int{pids["kube-controller-manager"]} }, time.Second)
	api := benchside.Track(func() []int { return []int{pids["kube-apiserver"]} }, time.Second)
	watchBefore, err := benchside.ScrapeWatch(ctx, c.kube)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	machine := benchside.SampleMachine(250 * time.Millisecond) // every core busy: the steps wait their turn
	start := time.Now()
	for _, p := range plans {
		if _, err := c.dyn.Resource(planGVR).Namespace(sucNamespace).Create(ctx, p.object(), metav1.CreateOptions{}); err != nil {
			b.Fatalf("create plan %s: %v", p.name, err)
		}
	}
	waitFor(b, 60*time.Minute, "plan "+final+" done on every node", func() (bool, error) { return planDone(ctx, c, final) })
	wall := time.Since(start)
	machineCPU := machine.Stop()
	b.StopTimer()
	watchAfter, err := benchside.ScrapeWatch(ctx, c.kube)
	if err != nil {
		b.Fatal(err)
	}
	for _, t := range []*benchside.Tracker{ctl, kcm, api} {
		t.Stop()
	}
	r := benchside.Result{Contender: "suc", Shape: shape, Nodes: nodes, Wall: wall, Controller: ctl.Usage(), KCM: kcm.Usage(), APIServer: api.Usage(),
		Watch: watchAfter.Since(watchBefore), Load: benchside.LoadAverage(), Settings: settings, Floor: floor, Machine: machineCPU}
	time.Sleep(2 * time.Second) // the apiserver writes its audit log in batches, at least every second
	events, err := testenv.ReadAudit(auditLog)
	if err != nil {
		b.Fatal(err)
	}
	w := countWrites(events, start, start.Add(wall))
	r.Writes, r.Own = w.perNode(nodes), float64(w.by[writerSUC]+w.by[writerJobs])/float64(nodes)
	r.JobController = benchside.PaceOf(benchside.JobControllerWrites(events), start, start.Add(wall), benchside.ControllerManagerLimit(kcmQPS))
	b.ReportMetric(wall.Seconds(), "wall-s")
	b.ReportMetric(r.Own, "writes-suc+jobs/node")
	b.Log(r.Summary())
	for _, l := range w.lines(nodes) {
		b.Log(l)
	}
	b.Log(timelineLine(events, start, start.Add(wall)))
	for _, l := range slotTable(events, start, start.Add(wall)) {
		b.Log(l)
	}
	fmt.Println(r.Line())
	if unschedulable := cordoned(ctx, b, c); len(unschedulable) > 0 {
		b.Errorf("nodes left cordoned: %s", strings.Join(unschedulable, " "))
	}
}

func cordoned(ctx context.Context, b *testing.B, c clients) []string {
	list, err := c.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Error(err)
		return nil
	}
	var out []string
	for _, n := range list.Items {
		if n.Spec.Unschedulable {
			out = append(out, n.Name)
		}
	}
	return out
}
