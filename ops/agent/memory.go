package agent

import (
	"slipway.dev/slipway/ops/agentmem"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// What the agent tells ops/agentmem, which keeps it small in memory (see
// docs/agent.md, Memory): whether it is busy with a rollout, so that the
// pages the rollout's code mapped are let go of soon after its work ends
// rather than at the next periodic unmapping, and when the fleet view made
// garbage (its list of the channel's nodes, every resync), so that the heap
// is handed back after it rather than grown by it.

// memoryReports is where the agents' reports go: ops/agentmem, or a
// test's recorder (keyed by node: a test runs several agents in process).
var memoryReports = struct {
	busy  func(node string, busy bool)
	burst func(node string)
}{
	busy:  func(_ string, busy bool) { agentmem.SetBusy(busy) },
	burst: func(string) { agentmem.ReleaseHeap() },
}

// noteMemory is called after every unit of work.
func (a *Agent) noteMemory(k key) {
	if k.role == roleFleet && a.leading(k.channel) {
		memoryReports.burst(a.opts.NodeName)
	}
	memoryReports.busy(a.opts.NodeName, a.busyWithRollout())
}

// busyWithRollout tells whether any channel gives this agent rollout work
// now (rolloutWork).
func (a *Agent) busyWithRollout() bool {
	list, err := a.listChannels()
	if err != nil {
		return true // cannot tell: unmap on the periodic schedule only
	}
	for _, ch := range list {
		if rolloutWork(ch.Status, a.opts.NodeName, a.leading(ch.Name)) {
			return true
		}
	}
	return false
}

// rolloutWork tells whether a channel's status gives node's agent rollout
// work: the node holds a slot or a staging permit, or the agent holds the
// channel's Lease (leading) while any node does.
func rolloutWork(st v1.UpdateChannelStatus, node string, leading bool) bool {
	if leading && (len(st.Updating) > 0 || len(st.Staging) > 0) {
		return true
	}
	for _, s := range st.Updating {
		if s.Node == node {
			return true
		}
	}
	for _, p := range st.Staging {
		if p.Node == node {
			return true
		}
	}
	return false
}
