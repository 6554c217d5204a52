package plan

import (
	"fmt"
	"time"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// Phases of a slot (status.updating[].phase), in the order a node goes through them.
const (
	PhasePending      = "Pending"      // slot taken, Job not created yet
	PhaseUpgrading    = "Upgrading"    // upgrade Job running
	PhaseDraining     = "Draining"     // Job succeeded, node cordoned and being drained
	PhaseRebooting    = "Rebooting"    // drained, reboot requested
	PhaseWaitingReady = "WaitingReady" // back at the new version, waiting for Ready
)

// SlotNode is what the stale-slot check knows of a slot's node.
type SlotNode struct {
	Exists bool
	Ready  bool
	// NotReadyFor is how long the fleet view has seen the node NotReady:
	// since it first read the Ready condition's current transition, on
	// its own clock (the condition's lastTransitionTime is written on the
	// kubelet's or the node lifecycle controller's clock). Zero when Ready.
	NotReadyFor time.Duration
	// AgentKnown: the agent's heartbeat was read (Agent says what of it).
	AgentKnown bool
	Agent      Heartbeat
}

// SlotJob is what the stale-slot check knows of a slot's upgrade Job.
type SlotJob struct {
	Exists     bool
	Failed     bool
	Reason     string    // why it failed (condition reason and message)
	FinishedAt time.Time // when it failed
}

// JobGrace is how long the node's own agent has to record its failed Job
// before the fleet view does it instead.
const JobGrace = time.Minute

// slack is added to the sum of a slot's timeouts before it counts as stuck.
const slack = 2 * time.Minute

// MaxSlotAge is the longest any slot may be held: every step's timeout plus
// slack. A slot older than this is stale whatever its node says.
func MaxSlotAge(s Settings) time.Duration {
	d := s.UpgradeTimeout + s.RebootDelay + s.NodeReadyTimeout + slack
	if s.Drain.Enabled {
		d += s.Drain.Timeout
	}
	return d
}

// Stale decides whether the holder of the fleet view must take slot away
// from its node, and why. The node's own agent handles its slot while it
// runs; this is the way out when it cannot.
func Stale(s Settings, slot v1.Slot, node SlotNode, job SlotJob, now time.Time) (bool, string) {
	switch {
	case !node.Exists:
		return true, fmt.Sprintf("node %s was deleted while it held a slot", slot.Node)
	case job.Failed && now.Sub(job.FinishedAt) > JobGrace:
		return true, fmt.Sprintf("upgrade job %s failed: %s", slot.Job, job.Reason)
	case !node.Ready && node.NotReadyFor > s.NodeReadyTimeout:
		return true, fmt.Sprintf("node %s has not been Ready for %s (nodeReadyTimeout %s)",
			slot.Node, node.NotReadyFor.Round(time.Second), s.NodeReadyTimeout)
	case now.Sub(slot.Since.Time) > MaxSlotAge(s):
		return true, fmt.Sprintf("node %s held its slot for %s, longer than its timeouts allow (%s); check its agent's logs",
			slot.Node, now.Sub(slot.Since.Time).Round(time.Second), MaxSlotAge(s))
	}
	return false, ""
}

// Counts summarises the selected nodes against target.
func Counts(nodes []Node, st v1.UpdateChannelStatus, target string) v1.NodeCounts {
	c := v1.NodeCounts{Nodes: len(nodes), Updating: len(st.Updating), Failed: failuresAt(st, target)}
	for _, n := range nodes {
		switch {
		case target == "":
		case n.Version == target:
			c.UpToDate++
		case n.Prestaged == target:
			c.Staged++
		}
	}
	return c
}

// Prune drops failure entries that no longer matter: for another version
// than target, or for nodes now at target or no longer selected.
func Prune(st *v1.UpdateChannelStatus, nodes []Node, target string) {
	at := make(map[string]string, len(nodes))
	for _, n := range nodes {
		at[n.Name] = n.Version
	}
	kept := st.Failed[:0:0]
	for _, f := range st.Failed {
		v, selected := at[f.Node]
		if f.Version == target && selected && v != target {
			kept = append(kept, f)
		}
	}
	st.Failed = kept
}

// beforeReboot reports whether a slot's node has not asked for its reboot yet.
func beforeReboot(phase string) bool {
	return phase == "" || phase == PhasePending || phase == PhaseUpgrading || phase == PhaseDraining
}

// Abandoned decides whether the fleet view takes a slot away from a node
// that went away before its reboot: NotReady for longer than JobGrace, or
// its agent silent for longer than agentTTL (Heartbeat: as the controller
// saw it, never by the agent's clock). Such a slot is released
// without a failure (a powered-off node is not a bad release) and the node
// is skipped until it is back. After the reboot was asked for, a node that
// does not come back is the upgrade's failure: Stale decides.
func Abandoned(slot v1.Slot, node SlotNode, agentTTL time.Duration, now time.Time) (bool, string) {
	if !node.Exists || !beforeReboot(slot.Phase) {
		return false, ""
	}
	switch {
	case !node.Ready && node.NotReadyFor > JobGrace:
		return true, fmt.Sprintf("node %s turned NotReady %s ago, before its reboot: slot released, not counted as a failure",
			slot.Node, node.NotReadyFor.Round(time.Second))
	case node.AgentKnown && !node.Agent.Reported:
		return true, fmt.Sprintf("node %s has no slipway agent reporting: slot released, not counted as a failure", slot.Node)
	case node.AgentKnown && node.Agent.Silent(agentTTL):
		return true, fmt.Sprintf("the slipway agent of node %s stopped reporting: its heartbeat has not been renewed for %s (more than %s), before its reboot: slot released, not counted as a failure",
			slot.Node, node.Agent.SilentFor.Round(time.Second), node.Agent.Counts(agentTTL))
	}
	return false, ""
}
