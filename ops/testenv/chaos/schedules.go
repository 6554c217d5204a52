package chaos

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"slipway.dev/slipway/ops/testenv/faults"
)

// Named is a fixed schedule for one interleaving a review found: the run
// must pass under the monitor once the defect is fixed.
type Named struct {
	System string
	// What the schedule reproduces, and the rule it breaks while the
	// defect stands.
	Doc      string
	Nodes    int
	Schedule faults.Schedule
	// Variant is the system's setup for the case ("": the default run).
	Variant string
}

// Schedules are the named schedules, by name.
var Schedules = map[string]Named{
	// Three control-plane nodes (node-1..3) at concurrency 1: node-2 is
	// powered off before the rollout starts and stays off for 40 s. While
	// it is down no other server may start (down is down, slot or not);
	// today the next server's slot is granted beside it.
	"k3os-notready-server": {System: "k3os", Nodes: 5,
		Doc:      "a NotReady control-plane node with no slot must stop the next server's slot (cordon-control-plane-alone)",
		Schedule: faults.Schedule{{At: 0, Kind: faults.NotReady, Target: "node/node-2", For: 40 * time.Second}}},
	// A worker (node-5) is NotReady while the others roll at concurrency
	// 1: the channel's budget is spent while it is down, so no other
	// worker may be cordoned beside it (cordon-within-budget, as the
	// channel-concurrency rule counts NotReady nodes).
	"k3os-notready-worker": {System: "k3os", Nodes: 5,
		Doc:      "a NotReady worker with no slot spends a concurrency-1 channel's budget (cordon-within-budget)",
		Schedule: faults.Schedule{{At: 0, Kind: faults.NotReady, Target: "node/node-5", For: 90 * time.Second}}},
	// Every control-plane node's reboot stalls for 30 s (a host hung in
	// its firmware): the server rebooting stays NotReady with its slot,
	// and no other server may start meanwhile.
	"k3os-stalled-reboots": {System: "k3os", Nodes: 5,
		Doc: "stalled reboots of the servers: the slot is held while its node is down, no second server starts",
		Schedule: faults.Schedule{
			{At: 0, Kind: faults.StallReboot, Target: "node/node-1", For: 30 * time.Second},
			{At: 0, Kind: faults.StallReboot, Target: "node/node-2", For: 30 * time.Second},
			{At: 0, Kind: faults.StallReboot, Target: "node/node-3", For: 30 * time.Second},
		}},
	// The controller's leader is paused (SIGSTOP) in the middle of the
	// rollout and its Lease taken over; resumed, it must not act on its
	// stale view: no second slot, no cordon beyond the budget.
	"k3os-paused-leaders": {System: "k3os", Nodes: 5,
		Doc: "both controllers paused in turn mid-rollout, agents cut off and back: nothing beyond the budget",
		Schedule: faults.Schedule{
			{At: 3 * time.Second, Kind: faults.Pause, Target: "controller/a", For: 10 * time.Second},
			{At: 5 * time.Second, Kind: faults.Partition, Target: "agent/node-1", For: 4 * time.Second},
			{At: 14 * time.Second, Kind: faults.Pause, Target: "controller/b", For: 10 * time.Second},
			{At: 16 * time.Second, Kind: faults.HalfOpen, Target: "agent/node-2", For: 6 * time.Second},
			{At: 26 * time.Second, Kind: faults.Kill, Target: "controller/a"},
			{At: 27 * time.Second, Kind: faults.Kill, Target: "controller/b"},
		}},
}

// NamedOptions are the options that run the named schedule name.
func NamedOptions(name string) (Options, error) {
	n, ok := Schedules[name]
	if !ok {
		var names []string
		for k := range Schedules {
			names = append(names, k)
		}
		slices.Sort(names)
		return Options{}, fmt.Errorf("chaos: no schedule named %q (known: %s)", name, strings.Join(names, ", "))
	}
	end := time.Duration(0)
	for _, f := range n.Schedule {
		end = max(end, f.At+f.For)
	}
	return Options{System: n.System, Name: name, Nodes: n.Nodes, Schedule: n.Schedule, Duration: end, Variant: n.Variant}, nil
}
