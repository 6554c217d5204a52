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
	// powered off as the rollout starts and stays off for 40 s. While it
	// is down no other server may be cordoned (down is down, slot or not),
	// even one whose slot was granted a moment before node-2 went down:
	// its drain asks the server gate again before its cordon.
	"k3os-notready-server": {System: "k3os", Nodes: 5,
		Doc:      "a NotReady control-plane node with no slot must stop the next server's slot (cordon-control-plane-alone)",
		Schedule: faults.Schedule{{At: 0, Kind: faults.NotReady, Target: "node/node-2", For: 40 * time.Second}}},
	// A worker (node-5) is NotReady while the others roll at concurrency
	// 1: the channel's budget is spent while it is down, so no other node
	// may be cordoned beside it (cordon-within-budget, as the
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

	// The channel gets an analysis (a stand-in Prometheus, a 3 s bake after
	// each node) as the rollout starts; Prometheus is down for 15 s from
	// the first wave on, while both controllers are paused or killed in
	// turn. No slot may be granted while the channel's status says the
	// analysis holds or a wave is not passed (analysis-gate).
	"k3os-analysis-holds": {System: "k3os", Nodes: 5, Variant: "analysis",
		Doc: "no slot while the channel's analysis cannot be evaluated or a wave is not passed (analysis-gate)",
		Schedule: faults.Schedule{
			{At: 10 * time.Second, Kind: faults.Kill, Target: "controller/a"},
			{At: 16 * time.Second, Kind: faults.Pause, Target: "controller/b", For: 3 * time.Second},
			{At: 30 * time.Second, Kind: faults.Kill, Target: "controller/b"},
		}},

	// The ExtendedDaemonSet, the swarm and the update operator: the cases a
	// review found, each with the variant of the run that reaches it.

	// canary.replicas 0% with a 3 s duration: a canary on no node,
	// validated by time, then the rolling update; the leader is killed and
	// the other paused meanwhile. Before its fix every change failed at
	// once (NoEligibleNode) and v1 was restored: the run never settles at v2.
	"eds-canary-replicas-zero": {System: "eds", Nodes: 5, Variant: "canary-zero",
		Doc: "canary.replicas 0 is a timed hold, then the rollout (settles at v2)",
		Schedule: faults.Schedule{
			{At: time.Second, Kind: faults.Kill, Target: "controller/a"},
			{At: 2 * time.Second, Kind: faults.Pause, Target: "controller/b", For: 3 * time.Second},
		}},
	// The canary's pod restarts once, then its node is deleted for good;
	// the controllers are cut off and killed meanwhile. The canary is
	// judged on the nodes it still has and validated; before its fix the
	// gone node's pod counted as not Ready and the canary was rolled back
	// at canaryTimeout (75 minutes): the run never settles at v2.
	"eds-canary-node-leaves": {System: "eds", Nodes: 5, Variant: "canary-node-leaves",
		Doc: "a canary whose node leaves is validated on its other nodes (settles at v2)",
		Schedule: faults.Schedule{
			{At: time.Second, Kind: faults.Partition, Target: "controller/a", For: 3 * time.Second},
			{At: 5 * time.Second, Kind: faults.Kill, Target: "controller/b"},
			{At: 6 * time.Second, Kind: faults.Latency, Target: "controller/a", For: 4 * time.Second, Arg: 300 * time.Millisecond},
		}},
	// A manual canary failed while a site policy refuses the active
	// template the controller restores (lifted after 20 s); both
	// controllers are killed in turn. No hot loop (bounded-write-requests:
	// before its fix the restore was retried at full speed, 248 PATCHes in
	// 5 s), then Canary Failed with v1 everywhere.
	"eds-refused-restore": {System: "eds", Nodes: 5, Variant: "refused-restore",
		Doc: "a refused template restore backs off (bounded-write-requests), then restores v1",
		Schedule: faults.Schedule{
			{At: 4 * time.Second, Kind: faults.Kill, Target: "controller/a"},
			{At: 10 * time.Second, Kind: faults.Kill, Target: "controller/b"},
			{At: 25 * time.Second, Kind: faults.Drop, Target: "controller/a"},
		}},
	// v2 fails to prepare on every host (it does not verify) while the
	// leader is killed and the other paused: once it failed on two nodes
	// (--halt-after 2) no node starts it (update-operator-brake); before
	// the brake every node was tried in turn.
	"uo-release-fails-everywhere": {System: "update-operator", Nodes: 5, Variant: "release-fails",
		Doc: "a release failing on --halt-after nodes starts on no more (update-operator-brake)",
		Schedule: faults.Schedule{
			{At: 3 * time.Second, Kind: faults.Kill, Target: "controller/a"},
			{At: 8 * time.Second, Kind: faults.Pause, Target: "controller/b", For: 3 * time.Second},
			{At: 40 * time.Second, Kind: faults.Drop, Target: "controller/a"},
		}},
	// node-1 comes back from its reboot on v2 and goes NotReady (for 75 s)
	// before its agent says it is back, while the controllers are killed
	// in turn: its update must fail past --state-timeout (30 s), with a
	// reason, and free its slot (update-operator-notready-slot). Before
	// its fix it held the slot, silently, until the node came back.
	"uo-notready-after-update": {System: "update-operator", Nodes: 5, Variant: "notready-after-update",
		Doc: "a node back on the new version that goes NotReady frees its slot within --state-timeout (update-operator-notready-slot)",
		Schedule: faults.Schedule{
			{At: 5 * time.Second, Kind: faults.Kill, Target: "controller/a"},
			{At: 35 * time.Second, Kind: faults.Kill, Target: "controller/b"},
		}},
	// The update operator with an analysis (a stand-in Prometheus, a 3 s
	// bake after each node): Prometheus is down for 15 s from the first
	// wave on, while the leader is killed and the other paused. No node may
	// start while the fleet state holds a wave not passed
	// (analysis-gate); the rollout ends at v2.
	"uo-analysis-holds": {System: "update-operator", Nodes: 5, Variant: "analysis",
		Doc: "no node starts while the update operator's analysis cannot be evaluated or a wave is not passed (analysis-gate)",
		Schedule: faults.Schedule{
			{At: 8 * time.Second, Kind: faults.Kill, Target: "controller/a"},
			{At: 14 * time.Second, Kind: faults.Pause, Target: "controller/b", For: 3 * time.Second},
			{At: 30 * time.Second, Kind: faults.Kill, Target: "controller/a"},
		}},
	// A worker stopped with SIGSTOP past its 6 s Lease: its jobs move to
	// the others; its application must stop them first, by the jobs file's
	// validity (swarm-no-double-holder). Resumed, it rejoins.
	"swarm-sigstop-worker": {System: "swarm", Nodes: 5,
		Doc: "a SIGSTOPped worker's application stops its jobs before they start elsewhere (swarm-no-double-holder)",
		Schedule: faults.Schedule{
			{At: 2 * time.Second, Kind: faults.Pause, Target: "worker/swarm-worker-1", For: 14 * time.Second},
		}},
	// A worker pod force-deleted while its worker and application run on
	// (a node the API server cannot reach): the StatefulSet's replacement,
	// of the same name, must not share the old incarnation's Lease and run
	// its jobs beside it (swarm-no-double-holder). The workers' Lease is
	// 20 s (long-lease): the old application runs on until its last jobs
	// file's validity lapses, well after the replacement has started, so
	// a replacement that took the Lease over at once (the Lease held as
	// the pod's name) runs its jobs beside it.
	"swarm-force-deleted-pod": {System: "swarm", Nodes: 5, Variant: "long-lease",
		Doc: "a force-deleted pod's replacement waits for the old incarnation's Lease (swarm-no-double-holder)",
		Schedule: faults.Schedule{
			{At: 2 * time.Second, Kind: faults.Kill, Target: "pod/swarm-worker-1"},
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
