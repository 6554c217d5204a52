package protocol

import "time"

// IdleHeartbeats is how many heartbeat intervals an agent waits between
// renewals while no channel asks anything of its node (no slot, every
// target already run). The Lease's duration says which it does: three of
// the intervals it waits. At thousands of nodes the renewals of idle
// agents are most of the fleet's writes at rest, and they reach every
// watcher of Leases (kube-controller-manager's among them).
const IdleHeartbeats = 5

// IdleHeartbeat is the interval of an idle agent whose busy interval is
// interval.
func IdleHeartbeat(interval time.Duration) time.Duration { return IdleHeartbeats * interval }

// AgentTTL is how long an agent's renewal counts when it renews every
// interval: three intervals, so that one late or lost renewal does not
// make a node agent-less. The agent declares it in its Lease; the
// controller bounds what it reads by the busy and idle ones.
func AgentTTL(interval time.Duration) time.Duration { return 3 * interval }
