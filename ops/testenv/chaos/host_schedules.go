package chaos

import (
	"maps"
	"time"

	"slipway.dev/slipway/ops/testenv/faults"
)

// The named schedules of the host faults (the k3os system): power cut at
// steps of the host upgrade, a full disk while staging, a release source
// slow, failing or serving corrupt artifacts. Each must pass under the
// monitor and the host checks (no mixed boot, nothing activated left
// without a slot), and the rollout must settle.

func init() { maps.Copy(Schedules, hostSchedules) }

// hostNamed are the host schedules that pass (TestHostSchedules);
// hostPending would hold those that fail today (none: a schedule of a
// defect still open runs from a file under -tags chaos_pending).
var (
	hostNamed = []string{"k3os-power-cut-swap", "k3os-full-disk", "k3os-source-faults",
		"k3os-power-cut-staging", "k3os-power-cut-rollback"}
	hostPending []string
)

// armed is how long a power cut stays armed: long enough for the rollout
// to reach the node at concurrency 1.
const armed = 150 * time.Second

var hostSchedules = map[string]Named{
	// A power cut between two links of the swap, on a server and on two
	// workers, each at another link: the node must boot one release (its
	// loader finishes the swap), and its slot must end with what it runs
	// next being what it runs.
	"k3os-power-cut-swap": {System: "k3os", Nodes: 5,
		Doc: "power cut between two links of the swap (rootfs current moved, kernel not yet, ...): one release booted, nothing left activated without a slot",
		Schedule: faults.Schedule{
			{At: 0, Kind: faults.PowerCut, Target: "node/node-1", For: armed, Step: "current:k3os"},
			{At: 0, Kind: faults.PowerCut, Target: "node/node-4", For: armed, Step: "previous:kernel"},
			{At: 0, Kind: faults.PowerCut, Target: "node/node-5", For: armed, Step: "previous:k3os"},
		}},
	// A power cut while staging ahead: after the staged files are synced,
	// and after one folder's rename into place. Nothing links to them: the
	// node boots v1, and staging again completes. Every node stages ahead
	// as the rollout starts, while the first slot's node is about to
	// cordon: node-2 (a server) loses power with no slot, and the slot's
	// server (granted while node-2 was Ready) is cordoned about a second
	// later, node-2 still down. Passes since the drain asks the budget and
	// the server gate again, live, before its cordon; before that fix it
	// failed cordon-within-budget and cordon-control-plane-alone (down is
	// down at the cordon, not only at the grant).
	"k3os-power-cut-staging": {System: "k3os", Nodes: 5,
		Doc: "power cut while staging ahead (after the sync, between two renames): v1 boots, staging again completes; no cordon begins while the cut server is down",
		Schedule: faults.Schedule{
			{At: 0, Kind: faults.PowerCut, Target: "node/node-2", For: armed, Step: "staged"},
			{At: 0, Kind: faults.PowerCut, Target: "node/node-5", For: armed, Step: "renamed:kernel"},
		}},
	// Evictions are blocked for 50 s as the rollout starts, longer than the
	// drain timeout (20 s): the first slot's drain fails after its swap,
	// and the agent rolls the swap back with a rollback Job. Every node
	// has a power cut armed at a link of the rollback: the node whose
	// rollback is cut boots one release (the loader finishes the
	// rollback), and nothing stays activated without a slot. Passes since
	// the same fix; before it, it failed: the rollback Job runs after the
	// failed slot is released, so the next node's slot is granted while
	// the previous node still writes its host; the cut during that
	// rollback takes the previous node down as the next one is cordoned
	// (cordon-within-budget, cordon-control-plane-alone). Both cut nodes
	// booted v1 whole.
	"k3os-power-cut-rollback": {System: "k3os", Nodes: 5,
		Doc: "a drain that fails after the swap, its rollback cut between two links: one release booted, nothing left activated",
		Schedule: faults.Schedule{
			{At: 0, Kind: faults.BlockEviction, Target: "pdb/default/guarded", For: 50 * time.Second},
			{At: 0, Kind: faults.PowerCut, Target: "node/node-1", For: armed, Step: "rollback:current:k3os"},
			{At: 0, Kind: faults.PowerCut, Target: "node/node-2", For: armed, Step: "rollback:previous:kernel"},
			{At: 0, Kind: faults.PowerCut, Target: "node/node-3", For: armed, Step: "rollback:current:k3os"},
			{At: 0, Kind: faults.PowerCut, Target: "node/node-4", For: armed, Step: "rollback:previous:kernel"},
			{At: 0, Kind: faults.PowerCut, Target: "node/node-5", For: armed, Step: "rollback:current:k3os"},
		}},
	// Two nodes' disks are full for 40 s as the rollout starts: their
	// staging fails with no space (the system directory as it was), then
	// succeeds once there is room.
	"k3os-full-disk": {System: "k3os", Nodes: 5,
		Doc: "a full disk while staging on two nodes for 40 s: staging fails cleanly and is retried",
		Schedule: faults.Schedule{
			{At: 0, Kind: faults.FullDisk, Target: "node/node-1", For: 40 * time.Second},
			{At: 0, Kind: faults.FullDisk, Target: "node/node-4", For: 40 * time.Second},
		}},
	// The release source fails (503) for 15 s, then serves corrupt
	// artifacts for 20 s (their checksum list intact), then answers 2 s
	// late for 15 s: no corrupt artifact is installed, the rollout
	// completes once the source is healthy.
	"k3os-source-faults": {System: "k3os", Nodes: 5,
		Doc: "the release source failing, then corrupt, then slow: nothing corrupt installed, the rollout completes",
		Schedule: faults.Schedule{
			{At: 0, Kind: faults.FailSource, Target: k3osSource, For: 15 * time.Second},
			{At: 15 * time.Second, Kind: faults.CorruptSource, Target: k3osSource, For: 20 * time.Second},
			{At: 35 * time.Second, Kind: faults.SlowSource, Target: k3osSource, For: 15 * time.Second, Arg: 2 * time.Second},
		}},
}
