package controller

import (
	"slipway.dev/slipway/ops/agentmem"
)

// What the controller tells ops/agentmem, which keeps it small in memory (see
// docs/agent.md, Memory): when the fleet view made garbage (its list of
// the channel's nodes, every resync), so that the heap is handed back
// after it rather than grown by it.

// memoryReports is where the reports go: ops/agentmem, or a
// test's recorder (keyed by identity: a test runs several replicas in process).
var memoryReports = struct {
	burst func(node string)
}{
	burst: func(string) { agentmem.ReleaseHeap() },
}

// noteMemory is called after every unit of work.
func (ctl *Controller) noteMemory(k key) {
	if k.role == roleFleet && ctl.leading(k.channel) {
		memoryReports.burst(ctl.opts.Identity)
	}
}
