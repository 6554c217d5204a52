// Package protocol is what the controller and the node agents say to each
// other, and how it is written: the controller writes each node a channel
// view (View) on its own Node; the node's agent writes back its slot report
// (Reports) on the same Node, and its versions, staged releases and
// heartbeat Lease; the slot's Job carries the name the controller chose.
// It holds their label and annotation keys, their encodings and the names
// both sides derive. It decides nothing (ops/plan does) and talks to no
// API server.
package protocol

// Every label and annotation the agent and the controller read or write,
// and who writes it.
// The drain package documents its own (drain.AnnotationCordonedBy,
// drain.AnnotationSchedulableBefore: written by Cordon on the agent's own
// node, removed by Uncordon). The upgrade Job's pod label
// app.kubernetes.io/name=slipway-upgrade is part of the Job contract.
const (
	// LabelRootfsVersion, LabelKernelVersion, LabelK3sVersion: on each Node,
	// written by that node's agent at start, after each upgrade, and again
	// whenever the Node lacks or disagrees with them (a Node deleted and
	// registered again), from its system directory's `current` links. Values are sanitized to be valid
	// label values (k3s versions hold '+'); the raw values are in the
	// annotations of the same names.
	LabelRootfsVersion = "ops.slipway.dev/rootfs-version"
	LabelKernelVersion = "ops.slipway.dev/kernel-version"
	LabelK3sVersion    = "ops.slipway.dev/k3s-version"

	// AnnotationRootfsVersion etc. hold the raw versions (same writer).
	// AnnotationRootfsVersion is the release a node runs: the fleet view
	// compares it with the channel's target.
	AnnotationRootfsVersion = "ops.slipway.dev/rootfs-version"
	AnnotationKernelVersion = "ops.slipway.dev/kernel-version"
	AnnotationK3sVersion    = "ops.slipway.dev/k3s-version"

	// AnnotationBootedBootID is written by the node's agent with the
	// versions above: the boot ID they were recorded in. The versions a boot
	// runs are recorded at the first sight of that boot; an agent restarted
	// on the same boot after a Job swapped `current` keeps them.
	AnnotationBootedBootID = "ops.slipway.dev/booted-boot-id"

	// LabelStagedRootfsVersion and AnnotationStaged*Version: on each Node,
	// written by its agent (on its cordon, and whenever it publishes): what
	// the system directory's `current` names for the next boot, where it
	// differs from what runs; absent when nothing is staged.
	LabelStagedRootfsVersion      = "ops.slipway.dev/staged-rootfs-version"
	AnnotationStagedRootfsVersion = "ops.slipway.dev/staged-rootfs-version"
	AnnotationStagedKernelVersion = "ops.slipway.dev/staged-kernel-version"
	AnnotationStagedK3sVersion    = "ops.slipway.dev/staged-k3s-version"

	// AnnotationPrestagedVersion: on each Node, written by its agent: the
	// channel's target when the node staged it ahead of its slot
	// (downloaded and verified into the system directory, `current` not
	// moved); removed when it runs it or the target changes. The Lease
	// holder counts it (status.counts.staged) and gives such a node no
	// staging permit. AnnotationPrestageFailedVersion: the target when
	// staging it failed plan.MaxStageAttempts times (the slot's Job then
	// downloads it); no permit for it either.
	AnnotationPrestagedVersion      = "ops.slipway.dev/prestaged-version"
	AnnotationPrestageFailedVersion = "ops.slipway.dev/prestage-failed-version"

	// AnnotationSlotReport: on each Node, written by its agent, read by the
	// controller: the node's slot progress and outcome and the staging
	// permit it gave back, by channel UID (plan.Reports as JSON). The agent
	// writes nothing into channel status; the controller folds these.
	AnnotationSlotReport = "ops.slipway.dev/slot-report"

	// AnnotationChannelViewPrefix + <channel UID>: on each Node, written by
	// the controller only (the agent's own-Node policy refuses it: it is
	// not under ops.slipway.dev/), read by that node's agent: what the node
	// needs of that channel (plan.View as JSON: its spec, target, resolved
	// release, the node's slot and staging permit). No agent reads the
	// channels.
	AnnotationChannelViewPrefix = "channel.ops.slipway.dev/"

	// AnnotationRebootFrom is written on its Node by the agent before it
	// records the Rebooting phase: the boot ID it reboots from. After the
	// agent restarts in that phase, a different boot ID proves the reboot
	// happened. It stays on the node (the next upgrade overwrites it), so a
	// crash at any point never makes the agent lose track of the reboot.
	AnnotationRebootFrom = "ops.slipway.dev/reboot-from-boot-id"

	// AnnotationDrainStarted is written on a Node by the controller in the
	// same write as slipway's cordon: when the drain began (RFC 3339). A
	// controller that takes a drain over (a restart, another replica)
	// counts drain.timeout from it, so handovers do not extend the drain.
	// Removed with the uncordon.
	AnnotationDrainStarted = "drain.slipway.dev/drain-started"

	// AnnotationCordonedFor is written by the controller with its cordon:
	// the namespace and channel (<namespace>/<channel>) it drains the node
	// for. It uncordons a node cordoned for a slot no channel of its
	// namespace holds any more (plan.LeftCordoned). Removed with the uncordon.
	AnnotationCordonedFor = "drain.slipway.dev/cordoned-for"

	// LabelJobNode and LabelJobChannel are on every upgrade Job and its pod,
	// written by the agent that creates the Job: the node's name (sanitized)
	// and the channel's name. Each agent watches only Jobs of its own node.
	LabelJobNode    = "ops.slipway.dev/node"
	LabelJobChannel = "ops.slipway.dev/channel"
	// AnnotationJobNode and AnnotationJobChannel hold the node's and the
	// channel's exact names on the Job and its pod (a label value is cut to
	// 63 characters; a channel name may be longer).
	AnnotationJobNode    = "ops.slipway.dev/node"
	AnnotationJobChannel = "ops.slipway.dev/channel"

	// LabelAppName/LabelAppNameUpgrade mark the upgrade Job's pod (contract
	// with the node executor of the simulated cluster and with RBAC).
	LabelAppName        = "app.kubernetes.io/name"
	LabelAppNameUpgrade = "slipway-upgrade"
	// LabelManagedBy is on every object the agent creates.
	LabelManagedBy      = "app.kubernetes.io/managed-by"
	LabelManagedByAgent = "slipway-agent"

	// AgentLeasePrefix names the Lease each agent renews as its heartbeat
	// (written by that node's agent, read by the controller):
	// <AgentLeasePrefix><node>.
	AgentLeasePrefix = "slipway-agent-"

	// CordonOwner is the owner recorded by drain.Cordon on the agent's node.
	CordonOwner = "slipway-agent"

	// ControllerLease names the Lease the controller's replicas compete for.
	ControllerLease = "slipway-channel-controller"

	// ControllerApp is the app.kubernetes.io/name label of the controller's
	// pods (the manifest's ControllerName; a test keeps them equal).
	ControllerApp = "slipway-controller"
)

// Annotations on an upgrade Job (and its pod) that name the one rollout it
// belongs to, written by the agent that creates it. A Job's result is
// believed only when they match the slot at hand: a Job of an earlier
// rollout to the same version (v1 -> v2 -> v1 -> v2), of a deleted and
// recreated channel, or of another channel says nothing about this one.
const (
	// AnnotationJobChannelUID is the UID of the channel whose slot made the Job.
	AnnotationJobChannelUID = "ops.slipway.dev/channel-uid"
	// AnnotationJobSlotSince is when that slot was claimed (RFC 3339, seconds):
	// with the node, version and attempt it tells one slot from every other.
	AnnotationJobSlotSince = "ops.slipway.dev/slot-since"
	// AnnotationJobVersion is the version the Job installs.
	AnnotationJobVersion = "ops.slipway.dev/version"
	// AnnotationJobAttempt is the slot's attempt.
	AnnotationJobAttempt = "ops.slipway.dev/attempt"

	// AnnotationJobAction is "stage", "prune" or "rollback" on the Jobs the
	// agent creates beside the slots' upgrade Jobs (none on those).
	AnnotationJobAction = "ops.slipway.dev/action"

	// AnnotationJobPermitSince ties a staging Job to its permit (the permit's
	// since, RFC 3339): a Job of an earlier permit says nothing about this one.
	AnnotationJobPermitSince = "ops.slipway.dev/permit-since"
)

// MovedToNodeUpdate are the Node annotations an agent writes into its
// NodeUpdate's status instead once it announces that it reads there, and
// takes off its Node then: nothing reads them on the Node any more.
var MovedToNodeUpdate = []string{AnnotationSlotReport, AnnotationRebootFrom, AnnotationPrestagedVersion, AnnotationPrestageFailedVersion}
