package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodeUpdate is one node's side of its updates, kept off the Node so that
// only that node's agent and the controller watch it: the controller
// writes its spec (the node's instructions, one entry per channel that
// concerns the node), the node's agent its status (its reports). It is
// named after its node, in slipway's namespace; an admission policy binds
// the agent's status writes to the object of the node named in its token.
type NodeUpdate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what the controller tells the node, written by the controller only.
	// +optional
	Spec NodeUpdateSpec `json:"spec,omitempty"`
	// Status is what the node reports, written by its agent only.
	// +optional
	Status NodeUpdateStatus `json:"status,omitempty"`
}

// NodeUpdateSpec is the node's instructions.
type NodeUpdateSpec struct {
	// Protocol is 2 once the controller writes the node's instructions
	// here and no longer on its Node (after the node's agent announced
	// that it reads them here: status.protocol); until then the agent
	// reads the views on its Node. It is 3 once the controller also reads
	// the node's versions from the status alone (after the agent announced
	// protocol 3): the agent then keeps only the version labels on its Node.
	// +optional
	Protocol int `json:"protocol,omitempty"`
	// Channels are the node's views of the channels that concern it (the
	// one it follows, and any where it holds a slot or a staging permit),
	// one per channel UID.
	// +optional
	// +listType=map
	// +listMapKey=uid
	Channels []NodeChannel `json:"channels,omitempty"`
}

// NodeChannel is the node's view of one channel, keyed by the channel's UID.
type NodeChannel struct {
	// UID is the channel's UID.
	UID types.UID `json:"uid"`
	// ChannelView is what the node needs of that channel.
	ChannelView `json:",inline"`
}

// ChannelView is what one node needs of one channel: its identity, the
// settings the agent acts on, its target, the resolved release, and the
// node's own slot and staging permit. The same encoding is the channel
// view annotation a Node carries for an agent that reads no NodeUpdate
// (ops/protocol's View).
type ChannelView struct {
	// Namespace is the channel's namespace.
	Namespace string `json:"namespace"`
	// Name is the channel's name.
	Name string `json:"name"`
	// Created is the channel's creation time (the earliest matching channel is the one a node follows).
	// +optional
	Created metav1.Time `json:"created"`
	// Spec is the channel's spec as far as the agent acts on it.
	Spec UpdateChannelSpec `json:"spec"`
	// LatestVersion is the channel's newest release, when it follows it (its target then).
	// +optional
	LatestVersion string `json:"latestVersion,omitempty"`
	// Resolved is the channel's resolved release, when it is of the target.
	// +optional
	Resolved *ResolvedRelease `json:"resolved,omitempty"`
	// Slot is the node's slot with the phases the controller decides:
	// Upgrading (granted) or Rebooting (drained, or the node went on to its
	// reboot); the node's own reports carry the others.
	// +optional
	Slot *Slot `json:"slot,omitempty"`
	// Permit is the node's staging permit.
	// +optional
	Permit *StagePermit `json:"permit,omitempty"`
}

// NodeUpdateStatus is what the node's agent reports.
type NodeUpdateStatus struct {
	// Protocol is the protocol the node's agent speaks: 2 when it reads its
	// instructions here (once spec.protocol is 2) and reports here; the
	// controller then reads its reports here and not on its Node. 3 when it
	// also keeps booted and staged here current at every change; the
	// controller then reads the node's versions here and not on its Node.
	// +optional
	Protocol int `json:"protocol,omitempty"`
	// Reports are the node's reports of its slots and given-back staging
	// permits, one per channel UID.
	// +optional
	// +listType=map
	// +listMapKey=uid
	Reports []NodeReport `json:"reports,omitempty"`
	// RebootFrom is the boot ID the node reboots from, recorded before it
	// reports the Rebooting phase: a different boot ID after the agent
	// restarts proves the reboot happened.
	// +optional
	RebootFrom string `json:"rebootFrom,omitempty"`
	// Booted is what the node's current boot runs, recorded by its agent at
	// the first sight of that boot, with that boot's ID (the raw versions;
	// the Node keeps the sanitized labels users select on). It is written
	// with the report that ends a slot, so a reader that folds the report
	// sees the versions the node came back with, and (protocol 3) whenever
	// it changes.
	// +optional
	Booted *NodeVersions `json:"booted,omitempty"`
	// Staged is what the node's system directory names for its next boot,
	// where it differs from what runs; absent when nothing is staged
	// (protocol 3: published when the Node's staged annotations would be).
	// +optional
	Staged *NodeVersions `json:"staged,omitempty"`
	// PrestagedVersion is the channel's target when the node staged it
	// ahead of its slot; PrestageFailedVersion the target when staging it
	// failed every attempt.
	// +optional
	PrestagedVersion string `json:"prestagedVersion,omitempty"`
	// +optional
	PrestageFailedVersion string `json:"prestageFailedVersion,omitempty"`
}

// NodeVersions are the versions of a node's components.
type NodeVersions struct {
	// +optional
	Rootfs string `json:"rootfs,omitempty"`
	// +optional
	Kernel string `json:"kernel,omitempty"`
	// +optional
	K3s string `json:"k3s,omitempty"`
	// BootID is the boot the versions were recorded in (Booted only).
	// +optional
	BootID string `json:"bootID,omitempty"`
}

// NodeReport is the node's report for one channel, keyed by the channel's UID.
type NodeReport struct {
	// UID is the channel's UID.
	UID types.UID `json:"uid"`
	// SlotReport is the report.
	SlotReport `json:",inline"`
}

// SlotReport is a node's report of its slot in one channel, and of the
// staging permit it gave back there. The same encoding is the slot report
// annotation a Node carries for a controller of the previous protocol
// (ops/protocol's Report).
type SlotReport struct {
	// Since is the claim time of the slot reported (with Attempt and Version: the same grant).
	// +optional
	Since metav1.Time `json:"since,omitempty"`
	// Attempt is the slot's attempt.
	// +optional
	Attempt int `json:"attempt,omitempty"`
	// Version is the slot's version.
	// +optional
	Version string `json:"version,omitempty"`
	// Phase is the step the node reached in the slot.
	// +optional
	Phase string `json:"phase,omitempty"`
	// Job is the slot's upgrade Job.
	// +optional
	Job string `json:"job,omitempty"`
	// Outcome ends the slot: Succeeded, Failed or Released.
	// +optional
	Outcome string `json:"outcome,omitempty"`
	// Reason says why the slot ended so.
	// +optional
	Reason string `json:"reason,omitempty"`
	// At is when the slot ended.
	// +optional
	At metav1.Time `json:"at,omitempty"`
	// PermitDone is the claim time of the staging permit the node gave back.
	// +optional
	PermitDone *metav1.Time `json:"permitDone,omitempty"`
}
