package controller

import (
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/fleettest"
)

// memoryRecorder keeps every agent's reports to ops/agentmem, by node.
type memoryRecorder struct {
	mu     sync.Mutex
	bursts map[string]int
}

// recordMemoryReports sends the agents' reports to a recorder until the test ends.
func recordMemoryReports(t *testing.T) *memoryRecorder {
	r := &memoryRecorder{bursts: map[string]int{}}
	saved := memoryReports
	memoryReports.burst = func(node string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.bursts[node]++
	}
	t.Cleanup(func() { memoryReports = saved }) // after the fleet's agents stopped
	return r
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

// TestLeaseHolderReleasesTheHeap: the Lease holder says when its fleet
// view made garbage (ops/agentmem then hands the heap's free pages back).
func TestLeaseHolderReleasesTheHeap(t *testing.T) {
	const nodes = 3
	rec := recordMemoryReports(t)
	f := newFleet(t, nodes, nil)
	for i := range nodes {
		f.Start(fmt.Sprintf("%s-n%d", f.NS, i))
	}
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", Concurrency: 1, RebootDelay: fleettest.ZeroDelay(), NodeSelector: f.Selector()})
	f.WaitFor("every node at v2", 2*time.Minute, fleettest.Done(nodes))
	if rec.totalBursts() == 0 {
		t.Errorf("the Lease holder never asked for the heap to be handed back after its fleet view's work")
	}
}
