package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/testenv"
)

// benchStage is how long one node's staging takes in BenchmarkRolloutStaged:
// the slow mirror throttles each download of the rootfs to it.
var benchStage = envDuration("SLIPWAY_BENCH_STAGE", 30*time.Second)

// BenchmarkRolloutStaged rolls v2 through every fake node at concurrency
// 10 from a slow mirror (each node's download takes benchStage), with the
// nodes staging ahead of their slot (spec.prestage default: a quarter of
// the nodes at a time). It reports the wall time against two ideals:
// staging overlapped with the slots, benchStage + ceil(N/C) x (swap + drain
// + rebootDelay + reboot), and a stager bound to the slot, ceil(N/C) x
// (benchStage + swap + drain + rebootDelay + reboot), where swap and drain
// are this run's medians.
//
//	SLIPWAY_BENCH_UPGRADE=0s SLIPWAY_BENCH_REBOOT=20s go test ./ops/e2e -run '^$' -bench RolloutStaged -benchtime 1x
func BenchmarkRolloutStaged(b *testing.B) {
	c := setup(b)
	ctx := context.Background()
	slow, err := startSlowMirror(mirror, benchStage)
	if err != nil {
		b.Fatal(err)
	}
	defer slow.close()
	get := benchChannel(b, c, "staged", v1.UpdateChannelSpec{URL: slow.url})
	b.ResetTimer()
	start := time.Now()
	patched, err := c.ops.OpsV1().UpdateChannels(ns).Patch(ctx, "staged", "application/merge-patch+json", []byte(`{"spec":{"version":"v2"}}`), metav1.PatchOptions{})
	if err != nil {
		b.Fatal(err)
	}
	mostPermits := 0
	waitUntil(b, 60*time.Minute, "every node at v2", func() (bool, error) {
		ch := get()
		mostPermits = max(mostPermits, len(ch.Status.Staging))
		return ch.Status.ObservedGeneration >= patched.Generation && ch.Status.Counts.UpToDate == nodes && len(ch.Status.Updating) == 0, nil
	})
	wall := time.Since(start)
	b.StopTimer()
	time.Sleep(2 * time.Second) // the apiserver writes its audit log in batches
	events, err := testenv.ReadAudit(auditLog)
	if err != nil {
		b.Fatal(err)
	}
	medians, _ := timeline(events, env.Nodes)
	// swap: the slot's Job created -> its pod done; drain: then -> the reboot, less rebootDelay
	swap, drain := medians[1], max(0, medians[4]-medians[1]-benchRebootDelay)
	waves := time.Duration((nodes + benchConcurrency - 1) / benchConcurrency)
	perSlot := swap + drain + benchRebootDelay + benchReboot
	overlapped, slotBound := benchStage+waves*perSlot, waves*(benchStage+perSlot)
	b.ReportMetric(wall.Seconds(), "wall-s")
	b.ReportMetric(overlapped.Seconds(), "ideal-overlapped-s")
	b.ReportMetric(slotBound.Seconds(), "ideal-slot-bound-s")
	b.ReportMetric(wall.Seconds()/overlapped.Seconds(), "wall/overlapped")
	b.Logf("%d nodes, concurrency %d, staging %s per node (slow mirror), swap %s + drain %s + rebootDelay %s + reboot %s per slot (medians)",
		nodes, benchConcurrency, benchStage, swap.Round(10*time.Millisecond), drain.Round(10*time.Millisecond), benchRebootDelay, benchReboot)
	b.Logf("wall %s; ideal with staging overlapped %s (x%.3f); ideal with a slot-bound stager %s (x%.3f of it)",
		wall.Round(100*time.Millisecond), overlapped.Round(100*time.Millisecond), wall.Seconds()/overlapped.Seconds(),
		slotBound.Round(100*time.Millisecond), wall.Seconds()/slotBound.Seconds())
	b.Logf("rootfs downloads %d for %d nodes; most staging permits at once %d; load average %s",
		slow.rootfsReads.Load(), nodes, mostPermits, loadAverage())
	report := countWrites(events, start, start.Add(wall))
	for _, l := range report.lines(nodes) {
		b.Log(l)
	}
	b.Log(timelineLine(medians, 0))
	b.Log(stagingLine(events, start, start.Add(wall)))
}

// loadAverage is /proc/loadavg's first three fields.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// stagingLine reports, from the audit log, when the first slot's Pod was
// created after start, the median staging Job (created -> its pod's last
// status), and the refused writes by code, verb and resource.
func stagingLine(events []testenv.AuditEvent, start, end time.Time) string {
	var firstSlot time.Time
	created, done := map[string]time.Time{}, map[string]time.Time{}
	refused := map[string]int{}
	for _, ev := range events {
		if ev.Time.Before(start) || ev.Time.After(end) {
			continue
		}
		switch {
		case ev.Code >= 300 && ev.Verb != "get" && ev.Verb != "list" && ev.Verb != "watch":
			refused[fmt.Sprintf("%d %s %s", ev.Code, ev.Verb, ev.Resource)]++
		case ev.Verb == "create" && (ev.Resource == "pods" || ev.Resource == "jobs") && strings.HasPrefix(ev.Name, "upgrade-") && firstSlot.IsZero(): // the slot's Pod (a Job before)
			firstSlot = ev.Time
		case ev.Verb == "create" && ev.Resource == "jobs" && strings.HasPrefix(ev.Name, "stage-"):
			created[ev.Name] = ev.Time
		case ev.Resource == "pods/status" && strings.HasPrefix(ev.Name, "stage-") && strings.HasPrefix(ev.UserAgent, "slipway-testenv/executor"):
			if i := strings.LastIndex(ev.Name, "-"); i > 0 {
				done[ev.Name[:i]] = ev.Time // pods are <job>-<suffix>
			}
		}
	}
	var took []time.Duration
	for name, at := range created {
		if d, ok := done[name]; ok {
			took = append(took, d.Sub(at))
		}
	}
	var parts []string
	for k, n := range refused {
		parts = append(parts, fmt.Sprintf("%s %d", k, n))
	}
	slices.Sort(parts)
	return fmt.Sprintf("first slot Job %s after the patch; staging Job created -> pod done, median %s of %d; refused writes: %s",
		firstSlot.Sub(start).Round(100*time.Millisecond), median(took).Round(100*time.Millisecond), len(took), strings.Join(parts, ", "))
}
