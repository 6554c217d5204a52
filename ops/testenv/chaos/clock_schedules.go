package chaos

import (
	"maps"
	"time"

	"slipway.dev/slipway/ops/testenv/faults"
)

// The named schedules of the clock step: processes whose wall clock is
// minutes off while the rollout runs. What a step moves is the wall clock
// only (ops/internal/wallclock): every time a process writes to the API (a
// Lease's renewTime, a slot's since, a report's time, a drain's start) and
// every comparison of an API time with its own clock.

func init() { maps.Copy(Schedules, clockSchedules) }

// clockNamed are the clock schedules run by TestClockSchedules.
var clockNamed = []string{"k3os-clock-step", "k3os-clock-ahead-midslot", "uo-clock-step"}

// clockFor is how long the clocks stay stepped: most of a rollout of five
// nodes at concurrency 1.
const clockFor = 60 * time.Second

// clockShortFor is how long the clocks stay stepped in the short
// schedules make test runs: the rollout's first grants.
const clockShortFor = 15 * time.Second

// clockSteps are the faults of a clock schedule: a server's and a worker's
// agent 10 minutes behind, both controllers (so the leader, whichever it
// is) 10 minutes ahead, from the rollout's start for d.
func clockSteps(d time.Duration) faults.Schedule {
	return faults.Schedule{
		{At: 0, Kind: faults.ClockStep, Target: "controller/a", For: d, Arg: 10 * time.Minute},
		{At: 0, Kind: faults.ClockStep, Target: "controller/b", For: d, Arg: 10 * time.Minute},
		{At: 0, Kind: faults.ClockStep, Target: "agent/node-2", For: d, Arg: -10 * time.Minute},
		{At: 0, Kind: faults.ClockStep, Target: "agent/node-4", For: d, Arg: -10 * time.Minute},
	}
}

var clockSchedules = map[string]Named{
	// The leader's clock 10 min ahead, two agents' 10 min behind, during
	// the rollout: the agents' heartbeats look 20 min old to the leader,
	// the slots it grants look 20 min in the future to those agents.
	"k3os-clock-step": {System: "k3os", Nodes: 5,
		Doc:      "the controllers' clocks 10 min ahead and two agents' 10 min behind during the rollout: nothing beyond the budget, the rollout settles",
		Schedule: clockSteps(clockFor)},
	// The same for clockShortFor: make test's clock step (TestClockStepShort).
	"k3os-clock-step-short": {System: "k3os", Nodes: 5,
		Doc:      "the controllers' clocks 10 min ahead and two agents' 10 min behind for the rollout's first 15 s: no node skipped for its agent's clock, the rollout settles",
		Schedule: clockSteps(clockShortFor)},
	// Both controllers 10 min ahead twice for 20 s while slots are held
	// (node-1's drain, reboot and those after): every agent's heartbeat
	// then looks 10 min old to the leader.
	"k3os-clock-ahead-midslot": {System: "k3os", Nodes: 5,
		Doc: "the controllers' clocks 10 min ahead for 20 s twice while slots are held: no slot taken away beyond the budget",
		Schedule: faults.Schedule{
			{At: 12 * time.Second, Kind: faults.ClockStep, Target: "controller/a", For: 20 * time.Second, Arg: 10 * time.Minute},
			{At: 12 * time.Second, Kind: faults.ClockStep, Target: "controller/b", For: 20 * time.Second, Arg: 10 * time.Minute},
			{At: 45 * time.Second, Kind: faults.ClockStep, Target: "controller/a", For: 20 * time.Second, Arg: 10 * time.Minute},
			{At: 45 * time.Second, Kind: faults.ClockStep, Target: "controller/b", For: 20 * time.Second, Arg: 10 * time.Minute},
		}},
	"uo-clock-step": {System: "update-operator", Nodes: 5,
		Doc:      "the update operator's controllers 10 min ahead and two agents 10 min behind during the rollout: nothing beyond max-concurrent, the rollout settles",
		Schedule: clockSteps(clockFor)},
	"uo-clock-step-short": {System: "update-operator", Nodes: 5,
		Doc:      "the update operator's controllers 10 min ahead and two agents 10 min behind for the rollout's first 15 s: nothing beyond max-concurrent, the rollout settles",
		Schedule: clockSteps(clockShortFor)},
}
