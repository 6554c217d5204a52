package agent

import (
	"slipway.dev/slipway/ops/agentmem"
)

// What the agent tells ops/agentmem, which keeps it small in memory (see
// docs/agent.md, Memory): when the fleet view made garbage (its list of
// the channel's nodes, every resync), so that the heap is handed back
// after it rather than grown by it.

// memoryReports is where the agents' reports go: ops/agentmem, or a
// test's recorder (keyed by node: a test runs several agents in process).
var memoryReports = struct {
	burst func(node string)
}{
	burst: func(string) { agentmem.ReleaseHeap() },
}

// noteMemory is called after every unit of work.
func (a *Agent) noteMemory(k key) {
	if k.role == roleFleet && a.leading(k.channel) {
		memoryReports.burst(a.opts.NodeName)
	}
}
