package controller

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/analysis"
	"slipway.dev/slipway/ops/analysis/promtest"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/upgrade/layout"
)

// slotLog records, polling the channel, every slot seen after start: its
// node and whether it is a rollback slot, and the most slots held at once.
type slotLog struct {
	mu    sync.Mutex
	seen  map[string]v1.Slot // by node/since/version
	most  int
	start bool
}

func (f *fleet) logSlots(ctx context.Context) *slotLog {
	l := &slotLog{seen: map[string]v1.Slot{}}
	go func() {
		for ctx.Err() == nil {
			ch, err := f.Ops.OpsV1().UpdateChannels(f.NS).Get(ctx, "default", metav1.GetOptions{})
			if err == nil {
				l.mu.Lock()
				if l.start {
					l.most = max(l.most, len(ch.Status.Updating))
					for _, sl := range ch.Status.Updating {
						l.seen[sl.Node+"/"+sl.Since.String()+"/"+sl.Version] = sl
					}
				}
				l.mu.Unlock()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return l
}

func (l *slotLog) begin() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.start = true
}

func (l *slotLog) slots() ([]v1.Slot, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []v1.Slot
	for _, sl := range l.seen {
		out = append(out, sl)
	}
	return out, l.most
}

// rollbackFleet is a fleet of four nodes whose stand-in workload a real
// Prometheus scrapes: the workload on n1 fails half its requests while n1
// runs v2 (what its agent reports it booted: the Node's rootfs version
// label). Its channel goes to v2 two nodes at a time, gated by the error
// rate, with onFailure: rollback. The slots are logged from the failure on.
func rollbackFleet(t *testing.T, metrics string) (*fleet, []string, *slotLog, *promtest.Server) {
	t.Helper()
	return rollbackFleetOf(t, metrics, 4, nil)
}

// rollbackFleetOf is rollbackFleet with nodes nodes, prepare (unless nil)
// called before the channel is created.
func rollbackFleetOf(t *testing.T, metrics string, nodes int, prepare func(f *fleet, names []string)) (*fleet, []string, *slotLog, *promtest.Server) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the Prometheus server is a built tool")
	}
	f := newFleet(t, nodes, func(o *Options) { o.MetricsAddr = metrics })
	var names []string
	for i := range nodes {
		names = append(names, fmt.Sprintf("%s-n%d", f.NS, i))
	}
	bad := names[1]
	exp := promtest.StartExporter(t, names, func(node string) float64 {
		if node != bad {
			return 0
		}
		n, err := f.Kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err == nil && n.Labels[protocol.LabelRootfsVersion] == "v2" {
			return 0.5
		}
		return 0
	})
	prom := promtest.Start(t, promtest.Options{Targets: []string{exp.Addr}})
	for _, n := range names {
		f.Start(n)
	}
	lctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	slots := f.logSlots(lctx)
	if prepare != nil {
		prepare(f, names)
	}
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", Concurrency: 2, RebootDelay: fleettest.ZeroDelay(),
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS}},
		Analysis: &v1.AnalysisSpec{PrometheusURL: prom.URL, BakeTime: &metav1.Duration{Duration: 5 * time.Second}, Interval: &metav1.Duration{Duration: time.Second},
			OnFailure: v1.OnFailureRollback, Queries: []v1.AnalysisQuery{{Name: "error-rate", Query: errorRateQuery, Condition: "< 0.05"}}}})
	return f, names, slots, prom
}

// A release that raises the workload's error rate once node n1 runs it,
// under spec.analysis.onFailure: rollback. The wave with n1 fails and
// halts the rollout; its nodes (and only they) go back to v1 within the
// channel's concurrency, each through a rollback Job, a drain and a reboot (a new boot
// ID, v1 reported on the Node); the error rate falls, and the status says
// the rollback cured it. The halt stays until the channel is resumed:
// a new resume token lifts it, once.
func TestAnalysisRollsBackAFailedWave(t *testing.T) {
	t.Parallel() // its own fleet: namespace, nodes, controller, Prometheus and exporter
	metrics := promtest.FreeAddr(t)
	f, names, slots, prom := rollbackFleet(t, metrics)
	bad := names[1]
	ch := f.WaitFor("the analysis failed", 4*time.Minute, func(ch *v1.UpdateChannel) bool {
		return ch.Status.Analysis != nil && ch.Status.Analysis.Failed != nil
	})
	slots.begin()
	wave := ch.Status.Analysis.Failed.Nodes
	if !slices.Contains(wave, bad) {
		t.Fatalf("the failed wave %v does not hold %s", wave, bad)
	}
	boots := map[string]string{}
	at := map[string]string{} // what each node runs when the wave failed
	for _, n := range names {
		b, err := os.ReadFile(f.BootFile(n))
		if err != nil {
			t.Fatal(err)
		}
		boots[n], at[n] = string(b), f.Current(n)
	}
	for _, n := range wave {
		if at[n] != "v2" {
			t.Errorf("wave node %s runs %s when its wave failed, want v2", n, at[n])
		}
	}

	ch = f.WaitFor("the rollback cured the workload", 3*time.Minute, func(ch *v1.UpdateChannel) bool {
		as := ch.Status.Analysis
		return as != nil && as.Rollback != nil && as.Rollback.State == plan.WaveCured
	})
	rb := ch.Status.Analysis.Rollback
	t.Logf("rollback: %+v", *rb)
	t.Logf("wave of %d failed at %s; back at %s (%s later), judged cured at %s (bake 5s)", len(wave), ch.Status.Analysis.Failed.At.Format(time.TimeOnly),
		rb.Finished.Format(time.TimeOnly), rb.Finished.Sub(ch.Status.Analysis.Failed.At.Time), rb.JudgedAt.Format(time.TimeOnly))
	if rb.Version != "v2" || rb.RolledBack != len(wave) || rb.Verdict != "Pass" || !strings.Contains(rb.Message, "cured") {
		t.Errorf("status.analysis.rollback = %+v, want %d nodes back from v2 and the analysis passing", *rb, len(wave))
	}
	for _, nr := range rb.Nodes {
		if nr.State != plan.NodeRollbackDone || nr.From != "v2" || nr.To != "v1" || !slices.Contains(wave, nr.Node) {
			t.Errorf("node %+v, want RolledBack from v2 to v1", nr)
		}
	}
	if ch.Status.Analysis.Failed == nil || !fleettest.IsTrue(ch, v1.ConditionAnalysisFailed) {
		t.Errorf("the halt was lifted by the rollback: %+v", ch.Status.Analysis)
	}
	q, err := analysis.NewClient(prom.URL)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := q.Query(context.Background(), errorRateQuery, time.Now()); err != nil || len(s) != 1 || !(s[0].Value < 0.05) {
		t.Errorf("error rate %+v (%v) after the rollback, want it fallen under 0.05", s, err)
	} else {
		t.Logf("error rate after the rollback: %g", s[0].Value)
	}
	// The wave's nodes booted v1 again (new boots, v1 reported, uncordoned);
	// every other node runs what it ran when the wave failed.
	for _, n := range names {
		node := f.Node(n)
		b, _ := os.ReadFile(f.BootFile(n))
		switch {
		case slices.Contains(wave, n):
			if f.Current(n) != "v1" || node.Labels[protocol.LabelRootfsVersion] != "v1" || string(b) == boots[n] {
				t.Errorf("wave node %s: current %s, reported %q, boot %s (was %s): want v1 on a new boot",
					n, f.Current(n), node.Labels[protocol.LabelRootfsVersion], b, boots[n])
			}
		case f.Current(n) != at[n] || string(b) != boots[n]:
			t.Errorf("node %s moved: runs %s on boot %s, ran %s on boot %s when the wave failed", n, f.Current(n), b, at[n], boots[n])
		}
		if node.Spec.Unschedulable {
			t.Errorf("node %s left cordoned", n)
		}
	}
	// Only the wave's nodes held slots after the failure, rollback slots,
	// never more than concurrency at once.
	held, most := slots.slots()
	for _, sl := range held {
		if !sl.Rollback || !slices.Contains(wave, sl.Node) || sl.Version != "v1" || sl.From != "v2" {
			t.Errorf("a slot after the failed wave: %+v, want only rollback slots of the wave %v", sl, wave)
		}
	}
	if most > 2 {
		t.Errorf("%d slots held at once, over concurrency 2", most)
	}
	for reason, want := range map[string]int{ReasonWaveRollingBack: 1, ReasonWaveRolledBack: 1, ReasonRollbackCured: 1, ReasonNodeRolledBack: len(wave)} {
		if n := f.Events(reason, want); n < want {
			t.Errorf("%d %s Events, want %d", n, reason, want)
		}
	}
	gauge := fmt.Sprintf(`slipway_channel_rollback_nodes{channel="default",state="RolledBack",version="v2",wave="Cured"} %d`, len(wave))
	if !metricSays(t, "http://"+metrics+"/metrics", gauge, 30*time.Second) {
		t.Errorf("/metrics does not say %s", gauge)
	}
	c := meta.FindStatusCondition(ch.Status.Conditions, v1.ConditionAnalysisFailed)
	if c == nil || !strings.Contains(c.Message, plan.ResumeAnnotation) {
		t.Errorf("the AnalysisFailed condition does not say how to resume: %+v", c)
	}
	f.Holds("the halt stays after the rollback", 5*time.Second, func(ch *v1.UpdateChannel) bool {
		return len(ch.Status.Updating) == 0 && ch.Status.Analysis.Failed != nil
	})

	// A resume token lifts the halt once: the analysis passes (cured), so
	// the rollout goes on with a new slot.
	f.Patch(`{"metadata":{"annotations":{"` + plan.ResumeAnnotation + `":"t1"}}}`)
	ch = f.WaitFor("resumed", time.Minute, func(ch *v1.UpdateChannel) bool {
		as := ch.Status.Analysis
		return as != nil && as.Resumed == "t1" && len(ch.Status.Updating) > 0
	})
	if n := f.Events(ReasonAnalysisResumed, 1); n != 1 {
		t.Errorf("%d %s Events, want 1", n, ReasonAnalysisResumed)
	}
	for _, sl := range ch.Status.Updating {
		if sl.Rollback || sl.Version != "v2" {
			t.Errorf("slot after the resume %+v, want an upgrade to v2", sl)
		}
	}
}

// The same bad release, but n1 cannot go back: its rollback Job fails, or
// its previous version is gone from its system directory (removed after
// its upgrade, before the rollback). n1 is reported (status, Events) and
// left uncordoned at v2, the rest of its wave goes back, and since n1
// still fails its requests the status says the rollback did not cure the
// workload. The halt stays.
func TestAnalysisRollbackThatFailsIsReported(t *testing.T) {
	t.Parallel() // its own fleet: namespace, nodes, controller, Prometheus and exporter
	for _, c := range []struct {
		name string
		// breaks n1's rollback; want is what its failure says.
		breaks func(f *fleet, bad string)
		want   []string
	}{
		{"its rollback Job fails", func(f *fleet, bad string) {
			fleettest.FailRollbacks.Store(bad, 1000)
			f.T.Cleanup(func() { fleettest.FailRollbacks.Delete(bad) })
		}, []string{"rollback-", "failed"}},
		{"its previous version is gone", func(f *fleet, bad string) {
			l := layout.New(f.SystemDir(bad))
			current := func() string { v, _ := l.Current(layout.Rootfs); return v } // no test log from this goroutine
			go func() {                                                             // once its upgrade swapped v2 in, v1's rootfs goes
				for deadline := time.Now().Add(4 * time.Minute); current() != "v2"; time.Sleep(20 * time.Millisecond) {
					if time.Now().After(deadline) {
						return
					}
				}
				_ = os.RemoveAll(l.VersionDir(layout.Rootfs, "v1"))
			}()
		}, []string{"previous version is gone", "rootfs v1 is not on disk"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // a fleet of its own; FailRollbacks is keyed by its node
			metrics := promtest.FreeAddr(t)
			f, names, _, _ := rollbackFleet(t, metrics)
			bad := names[1]
			c.breaks(f, bad)
			ch := f.WaitFor("the rollback judged not cured", 4*time.Minute, func(ch *v1.UpdateChannel) bool {
				as := ch.Status.Analysis
				return as != nil && as.Rollback != nil && as.Rollback.State == plan.WaveNotCured
			})
			rb := ch.Status.Analysis.Rollback
			t.Logf("rollback: %+v", *rb)
			for _, nr := range rb.Nodes {
				switch {
				case nr.Node == bad:
					for _, w := range c.want {
						if nr.State != plan.NodeRollbackFailed || !strings.Contains(nr.Message, w) {
							t.Errorf("%s: %+v, want Failed saying %q", bad, nr, w)
						}
					}
				case nr.State != plan.NodeRollbackDone:
					t.Errorf("%+v, want RolledBack", nr)
				}
			}
			if rb.Verdict != "Fail" || !strings.Contains(rb.Message, "still fails") || ch.Status.Analysis.Failed == nil {
				t.Errorf("status.analysis = %+v, want the halt and the analysis still failing after the rollback", ch.Status.Analysis)
			}
			node := f.Node(bad)
			if f.Current(bad) != "v2" || node.Spec.Unschedulable || node.Annotations[drain.AnnotationCordonedBy] != "" {
				t.Errorf("%s: current %s, unschedulable %t, annotations %v: want v2, not cordoned", bad, f.Current(bad), node.Spec.Unschedulable, node.Annotations)
			}
			for reason, want := range map[string]int{ReasonNodeRollbackFail: 1, ReasonWaveRolledBack: 1, ReasonRollbackNotCured: 1} {
				if n := f.Events(reason, want); n < want {
					t.Errorf("%d %s Events, want %d", n, reason, want)
				}
			}
			f.Holds("the halt stays after the rollback", 5*time.Second, func(ch *v1.UpdateChannel) bool {
				return len(ch.Status.Updating) == 0 && ch.Status.Analysis.Failed != nil
			})
		})
	}
}

// TestWaveFailsWithItsLateNodes: two nodes granted together, the bad one
// (n1) finishes first and the analysis fails while the other (n0) still
// upgrades (its slot's Job held). The wave must not fail without n0: n0
// would finish on v2 outside the failed wave, and no rollback would take
// it back. The controller holds (AnalysisHolding WaveFinishing) until n0
// finished, then fails the wave with both, and rolls both back.
func TestWaveFailsWithItsLateNodes(t *testing.T) {
	t.Parallel()
	var release func(bool)
	f, names, _, _ := rollbackFleetOf(t, promtest.FreeAddr(t), 2, func(f *fleet, names []string) {
		release = f.HoldJobs(names[0])
	})
	late, bad := names[0], names[1]
	ch := f.WaitFor("the analysis failing with "+late+" still upgrading", 4*time.Minute, func(ch *v1.UpdateChannel) bool {
		h := meta.FindStatusCondition(ch.Status.Conditions, v1.ConditionAnalysisHolding)
		return (h != nil && h.Reason == "WaveFinishing") || (ch.Status.Analysis != nil && ch.Status.Analysis.Failed != nil)
	})
	if as := ch.Status.Analysis; as != nil && as.Failed != nil {
		t.Errorf("the wave failed as %v while %s still upgraded to its release", as.Failed.Nodes, late)
	}
	release(true)
	ch = f.WaitFor("the rollback ended", 3*time.Minute, func(ch *v1.UpdateChannel) bool {
		as := ch.Status.Analysis
		return as != nil && as.Rollback != nil && as.Rollback.Finished != nil
	})
	if got := ch.Status.Analysis.Failed.Nodes; !slices.Contains(got, late) || !slices.Contains(got, bad) {
		t.Errorf("the failed wave is %v, want both %s and %s", got, bad, late)
	}
	for _, n := range names {
		if f.Current(n) != "v1" {
			t.Errorf("node %s runs %s after the rollback of its wave, want v1", n, f.Current(n))
		}
	}
}
