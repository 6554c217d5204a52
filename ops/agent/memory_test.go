package agent

import (
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

func TestRolloutWork(t *testing.T) {
	slots := func(nodes ...string) []v1.Slot {
		var out []v1.Slot
		for _, n := range nodes {
			out = append(out, v1.Slot{Node: n, Version: "v2"})
		}
		return out
	}
	permits := func(nodes ...string) []v1.StagePermit {
		var out []v1.StagePermit
		for _, n := range nodes {
			out = append(out, v1.StagePermit{Node: n, Version: "v2"})
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		st      v1.UpdateChannelStatus
		leading bool
		want    bool
	}{
		{"nothing going on", v1.UpdateChannelStatus{}, false, false},
		{"nothing going on, leading", v1.UpdateChannelStatus{}, true, false},
		{"this node holds a slot", v1.UpdateChannelStatus{Updating: slots("b", "me")}, false, true},
		{"this node holds a staging permit", v1.UpdateChannelStatus{Staging: permits("me")}, false, true},
		{"others hold slots", v1.UpdateChannelStatus{Updating: slots("b", "c")}, false, false},
		{"others stage", v1.UpdateChannelStatus{Staging: permits("b")}, false, false},
		{"others hold slots, leading", v1.UpdateChannelStatus{Updating: slots("b")}, true, true},
		{"others stage, leading", v1.UpdateChannelStatus{Staging: permits("b")}, true, true},
		{"failed and skipped nodes only, leading", v1.UpdateChannelStatus{Failed: []v1.Failure{{Node: "b"}},
			Skipped: []v1.SkippedNode{{Node: "c"}}}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := rolloutWork(tc.st, "me", tc.leading); got != tc.want {
				t.Errorf("rolloutWork = %v, want %v", got, tc.want)
			}
		})
	}
}

// memoryRecorder keeps every agent's reports to ops/agentmem, by node.
type memoryRecorder struct {
	mu     sync.Mutex
	busy   map[string][]bool
	bursts map[string]int
}

// recordMemoryReports sends the agents' reports to a recorder until the test ends.
func recordMemoryReports(t *testing.T) *memoryRecorder {
	r := &memoryRecorder{busy: map[string][]bool{}, bursts: map[string]int{}}
	saved := memoryReports
	memoryReports.busy = func(node string, busy bool) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if l := r.busy[node]; len(l) == 0 || l[len(l)-1] != busy {
			r.busy[node] = append(l, busy)
		}
	}
	memoryReports.burst = func(node string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.bursts[node]++
	}
	t.Cleanup(func() { memoryReports = saved }) // after the fleet's agents stopped
	return r
}

// turns is node's reports, each a change from the one before.
func (r *memoryRecorder) turns(node string) []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bool(nil), r.busy[node]...)
}

func (r *memoryRecorder) totalBursts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.bursts {
		n += c
	}
	return n
}

// TestAgentsReportRolloutWork: every agent says it is busy while its node
// upgrades and idle once the rollout is over, and the Lease holder says
// when its fleet view made garbage (ops/agentmem then lets go of the
// rollout's pages and of the heap's free pages).
func TestAgentsReportRolloutWork(t *testing.T) {
	const nodes = 3
	rec := recordMemoryReports(t)
	f := newFleet(t, nodes, nil)
	n := func(i int) string { return fmt.Sprintf("%s-n%d", f.ns, i) }
	for i := range nodes {
		f.start(n(i))
	}
	f.channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", Concurrency: 1, RebootDelay: zeroDelay(), NodeSelector: selectFleet(f)})
	f.waitFor("every node at v2", 2*time.Minute, done(nodes))
	deadline := time.Now().Add(30 * time.Second)
	for i := range nodes {
		for {
			turns := rec.turns(n(i))
			busyOnce, idleNow := len(turns) > 1 || (len(turns) == 1 && turns[0]), len(turns) > 0 && !turns[len(turns)-1]
			if busyOnce && idleNow {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s reported %v, want busy at some point (its upgrade) and idle at the end", n(i), turns)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if rec.totalBursts() == 0 {
		t.Errorf("the Lease holder never asked for the heap to be handed back after its fleet view's work")
	}
}
