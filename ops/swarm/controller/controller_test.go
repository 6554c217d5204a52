package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/swarm/config"
)

func jobNames(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("stream-%02d", i))
	}
	return out
}

// TestStatefulSetScaling runs a real StatefulSet through 2 → 3 → 10 → 4 → 0
// → 3 workers, kills a middle pod, and edits the job list. After each step:
// every job is assigned exactly once, loads within one, the status says
// Converged, one reassignment was made (two versions when jobs moved
// between live workers: the revocations, then the assignments), and the
// pods restarted are exactly the surviving workers whose share changed.
func TestStatefulSetScaling(t *testing.T) {
	t.Parallel() // a namespace of its own (see TestMain)
	p := newPool(t, false)
	jobs := jobNames(0, 40)
	p.statefulSet(2)
	p.createSwarm(swarmv1.SwarmSpec{Jobs: jobs})
	p.converged(2)
	p.check(jobs)
	for _, n := range []int32{3, 10, 4, 0, 3} {
		before, uids := p.snapshot()
		p.scale(n)
		sw := p.converged(int(n))
		after := p.check(jobs)
		p.checkRestarts(before, after, uids, "")
		if d := after.Version - before.Version; d < 1 || d > 2 {
			t.Errorf("scaling to %d made versions %d to %d: want one reassignment per scale event (its revocations, then its assignments)", n, before.Version, after.Version)
		}
		if n == 0 && (sw.Status.Unassigned != int32(len(jobs)) || !hasReason(sw, swarmv1.ConditionBalanced, "NoWorkers")) {
			t.Errorf("scaled to 0: want every job unassigned and Balanced=False NoWorkers, got %+v", sw.Status)
		}
	}
	t.Run("middle pod killed", func(t *testing.T) {
		before, uids := p.snapshot()
		if err := p.kube.CoreV1().Pods(p.ns).Delete(context.Background(), "swarm-worker-1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		p.waitFor("the killed pod replaced", func(*swarmv1.Swarm) bool {
			u, ok := p.podUIDs()["swarm-worker-1"]
			return ok && u != uids["swarm-worker-1"]
		})
		p.converged(3)
		after := p.check(jobs)
		p.checkRestarts(before, after, uids, "swarm-worker-1")
		if after.Version != before.Version {
			t.Errorf("a pod that came back under its name changed the assignment: version %d -> %d", before.Version, after.Version)
		}
	})
	t.Run("job list edited", func(t *testing.T) {
		before, uids := p.snapshot()
		jobs = append(jobNames(3, 40), jobNames(40, 45)...)
		p.editSwarm(func(s *swarmv1.SwarmSpec) { s.Jobs = jobs })
		p.waitFor("the new job list assigned", func(sw *swarmv1.Swarm) bool { return sw.Status.Jobs == int32(len(jobs)) })
		p.converged(3)
		after := p.check(jobs)
		p.checkRestarts(before, after, uids, "")
	})
	t.Run("ConfigMap edited by hand", func(t *testing.T) {
		before, uids := p.snapshot()
		p.handSwap("swarm-worker-0", "swarm-worker-1")
		p.waitFor("the edit noticed", func(sw *swarmv1.Swarm) bool { return sw.Status.Version > before.Version })
		p.converged(3)
		after := p.check(jobs)
		p.checkRestarts(before, after, uids, "")
		if w2 := after.Workloads["swarm-worker-2"]; w2.Version != before.Workloads["swarm-worker-2"].Version {
			t.Errorf("the worker the edit left alone got a new version")
		}
	})
	p.checkHTTP()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.maxRestarting != 1 {
		t.Errorf("at most %d workers restarting at once, want exactly maxUnavailable (1)", p.maxRestarting)
	}
}

// TestLeaderElection: of two replicas one leads; when it stops, the other
// takes over and carries on.
func TestLeaderElection(t *testing.T) {
	t.Parallel() // a namespace of its own (see TestMain)
	p := newPool(t, true)
	jobs := jobNames(0, 9)
	p.statefulSet(2)
	p.createSwarm(swarmv1.SwarmSpec{Jobs: jobs, Refresh: swarmv1.RefreshReload})
	p.converged(2)
	second, stop := p.startController("second")
	defer stop()
	p.waitFor("the second replica's caches", func(*swarmv1.Swarm) bool { return second.synced.Load() })
	if !p.ctrl.Leading() || second.Leading() {
		t.Fatalf("leading: first %v, second %v; want the first only", p.ctrl.Leading(), second.Leading())
	}
	p.stopCtrl()
	p.waitFor("the second replica leading", func(*swarmv1.Swarm) bool { return second.Leading() })
	p.scale(3)
	p.converged(3)
	p.check(jobs)
}

// handSwap edits the workers' ConfigMap as a person would: one job of a
// goes to b and one of b to a, versions untouched.
func (p *pool) handSwap(a, b string) {
	p.t.Helper()
	cm, err := p.kube.CoreV1().ConfigMaps(p.ns).Get(context.Background(), "work"+swarmv1.ConfigMapSuffix, metav1.GetOptions{})
	if err != nil {
		p.t.Fatal(err)
	}
	cfg, err := config.Parse(cm.Data[swarmv1.ConfigMapKey])
	if err != nil {
		p.t.Fatal(err)
	}
	wa, wb := cfg.Workloads[a], cfg.Workloads[b]
	wa.Jobs, wb.Jobs = append(slices.Clone(wa.Jobs[1:]), wb.Jobs[0]), append(slices.Clone(wb.Jobs[1:]), wa.Jobs[0])
	cfg.Workloads[a], cfg.Workloads[b] = wa, wb
	if cm.Data[swarmv1.ConfigMapKey], err = cfg.Render(); err != nil {
		p.t.Fatal(err)
	}
	if _, err := p.kube.CoreV1().ConfigMaps(p.ns).Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		p.t.Fatal(err)
	}
}

func hasReason(sw *swarmv1.Swarm, cond, reason string) bool {
	c := meta.FindStatusCondition(sw.Status.Conditions, cond)
	return c != nil && c.Reason == reason
}

func (p *pool) snapshot() (config.Config, map[string]types.UID) {
	cfg, _ := p.config()
	return cfg, p.podUIDs()
}

// check asserts the workers' ConfigMap assigns every job exactly once, to
// the Ready pods, loads within one (workers running a dedicated job alone
// aside), and returns it.
func (p *pool) check(jobs []string, dedicated ...string) config.Config {
	p.t.Helper()
	cfg, _ := p.config()
	seen := map[string]string{}
	lo, hi := len(jobs), 0
	for w, share := range cfg.Workloads {
		for _, j := range share.Jobs {
			if other, dup := seen[j]; dup {
				p.t.Errorf("job %s on %s and %s", j, other, w)
			}
			seen[j] = w
		}
		if len(share.Jobs) == 1 && slices.Contains(dedicated, share.Jobs[0]) {
			continue
		}
		lo, hi = min(lo, len(share.Jobs)), max(hi, len(share.Jobs))
	}
	if len(cfg.Workloads) > 0 {
		for _, j := range jobs {
			if _, ok := seen[j]; !ok {
				p.t.Errorf("job %s assigned to no worker", j)
			}
		}
		if hi-lo > 1 {
			p.t.Errorf("loads range from %d to %d", lo, hi)
		}
	}
	if len(seen) > len(jobs) {
		p.t.Errorf("%d jobs assigned, %d in the list", len(seen), len(jobs))
	}
	uids := p.podUIDs()
	for w := range cfg.Workloads {
		if _, ok := uids[w]; !ok {
			p.t.Errorf("worker %s in the config has no pod", w)
		}
	}
	if len(uids) != len(cfg.Workloads) {
		p.t.Errorf("%d pods, %d workers in the config", len(uids), len(cfg.Workloads))
	}
	return cfg
}

// checkRestarts asserts the pods restarted between two snapshots (same
// name, new UID; killed aside) are exactly the surviving workers whose job
// set changed.
func (p *pool) checkRestarts(before, after config.Config, uidsBefore map[string]types.UID, killed string) {
	p.t.Helper()
	uidsAfter := p.podUIDs()
	var restarted, changed []string
	for name, uid := range uidsBefore {
		now, ok := uidsAfter[name]
		if !ok || name == killed {
			continue
		}
		if now != uid {
			restarted = append(restarted, name)
		}
		if b, ok := before.Workloads[name]; ok && !config.SameJobs(b.Jobs, after.Workloads[name].Jobs) {
			changed = append(changed, name)
		}
	}
	slices.Sort(restarted)
	slices.Sort(changed)
	if !slices.Equal(restarted, changed) {
		p.t.Errorf("restarted %v, but the surviving workers whose share changed are %v", restarted, changed)
	}
	p.t.Logf("version %d -> %d: %d workers, %d jobs moved, restarted %v", before.Version, after.Version, len(after.Workloads), moved(before, after), restarted)
}

// moved counts the jobs held in both configs by different workers.
func moved(before, after config.Config) int {
	owner := map[string]string{}
	for w, share := range before.Workloads {
		for _, j := range share.Jobs {
			owner[j] = w
		}
	}
	n := 0
	for w, share := range after.Workloads {
		for _, j := range share.Jobs {
			if o, ok := owner[j]; ok && o != w {
				n++
			}
		}
	}
	return n
}

// checkHTTP reads /assignments, /metrics and /healthz.
func (p *pool) checkHTTP() {
	p.t.Helper()
	get := func(path string) string {
		resp, err := http.Get("http://" + p.ctrl.Addr() + path)
		if err != nil {
			p.t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			p.t.Errorf("GET %s: %s %s", path, resp.Status, body)
		}
		return string(body)
	}
	var views map[string]View
	if err := json.Unmarshal([]byte(get("/assignments")), &views); err != nil {
		p.t.Fatalf("/assignments is not JSON: %v", err)
	}
	cfg, _ := p.config()
	if v := views["work"]; v.Version != cfg.Version || len(v.Assignments) != len(cfg.Workloads) || !v.Converged {
		p.t.Errorf("/assignments: %+v, want version %d over %d workers", v, cfg.Version, len(cfg.Workloads))
	}
	metrics := get("/metrics")
	for _, want := range []string{`slipway_swarm_jobs{swarm="work"}`, `slipway_swarm_moves_total{swarm="work"}`, `slipway_swarm_refreshes_total{swarm="work"}`, "slipway_swarm_leader 1"} {
		if !strings.Contains(metrics, want) {
			p.t.Errorf("/metrics lacks %s", want)
		}
	}
	if h := get("/healthz"); !strings.Contains(h, "ok") {
		p.t.Errorf("/healthz: %q", h)
	}
}
