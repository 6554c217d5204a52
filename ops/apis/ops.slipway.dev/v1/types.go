// Package v1 holds the ops.slipway.dev/v1 API: the UpdateChannel resource that
// the `slipway ops agent` DaemonSet uses to roll OS versions through a cluster.
//
// The types are written by hand; deepcopy, list types, registration, clients,
// listers, informers, wrangler controllers and the CRD YAML are generated from
// them by `scripts/generate` (ops/codegen). Doc comments become the CRD's field
// descriptions, `+default=` markers its schema defaults.
package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// UpdateChannel is a release channel that a set of nodes follows. The agents
// running on those nodes upgrade them, `concurrency` at a time, to the
// channel's version (or to the newest release when the version is "latest").
type UpdateChannel struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what the channel asks for: where releases come from, which
	// version, which nodes, and how fast.
	Spec UpdateChannelSpec `json:"spec"`
	// Status is what the agents report: the poller, the held slots, the
	// newest version seen, counts, failures and conditions.
	Status UpdateChannelStatus `json:"status,omitempty"`
}

// UpdateChannelSpec is the desired state of an UpdateChannel.
type UpdateChannelSpec struct {
	// URL of the release channel: github-releases://owner/repo, an
	// http(s):// URL whose redirect names the latest version, or a mirror
	// directory (file:///path or a plain path) laid out as <dir>/<version>/<artifact>.
	URL string `json:"url"`
	// Version the nodes should run. Empty or "latest" means: poll the
	// channel every pollInterval and follow its newest release.
	// +optional
	Version string `json:"version,omitempty"`
	// Concurrency is the most nodes that upgrade at the same time.
	// +default=1
	// +k8s:validation:minimum=1
	// +optional
	Concurrency int `json:"concurrency,omitempty"`
	// NodeSelector selects the nodes that follow this channel; empty selects every node.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// Paused stops new upgrades from starting; upgrades already running finish.
	// +optional
	Paused bool `json:"paused,omitempty"`
	// PollInterval is how often the channel is asked for its newest release
	// when version is empty or "latest".
	// +default="15m"
	// +optional
	PollInterval *metav1.Duration `json:"pollInterval,omitempty"`
	// Window restricts when upgrades may start; none means any time.
	// +optional
	Window *Window `json:"window,omitempty"`
	// Drain is how a node is emptied before it reboots.
	// +default={}
	// +optional
	Drain *DrainSpec `json:"drain,omitempty"`
	// RebootDelay is how long the agent waits between a successful drain and the reboot.
	// +default="5s"
	// +optional
	RebootDelay *metav1.Duration `json:"rebootDelay,omitempty"`
	// UpgradeTimeout is the deadline of the upgrade Job on a node.
	// +default="15m"
	// +optional
	UpgradeTimeout *metav1.Duration `json:"upgradeTimeout,omitempty"`
	// NodeReadyTimeout is how long a rebooted node has to come back Ready
	// before its upgrade counts as failed.
	// +default="10m"
	// +optional
	NodeReadyTimeout *metav1.Duration `json:"nodeReadyTimeout,omitempty"`
	// MaxFailures is how many failed nodes stop the rollout: while
	// status.failed holds this many entries no new node starts.
	// +default=1
	// +k8s:validation:minimum=1
	// +optional
	MaxFailures int `json:"maxFailures,omitempty"`
	// Components selects what an upgrade replaces (default: rootfs and kernel).
	// +default={}
	// +optional
	Components *Components `json:"components,omitempty"`
	// Image runs the upgrade Job; empty means the agent's own image.
	// +optional
	Image string `json:"image,omitempty"`
	// TokenSecretRef names a Secret in the channel's namespace holding a
	// GitHub token for a github-releases:// channel: the agent holding the
	// channel's Lease resolves the rollout's release with it, and the
	// upgrade Jobs get it as the GITHUB_TOKEN environment variable from the
	// Secret. It is never copied into the channel or a log.
	// +optional
	TokenSecretRef *SecretKeyRef `json:"tokenSecretRef,omitempty"`
	// Prestage downloads and verifies the target release on the nodes
	// behind it before they take a slot, without switching what boots, so
	// that a slot covers only the swap, the drain, the reboot and the return.
	// +optional
	Prestage *PrestageSpec `json:"prestage,omitempty"`
	// Analysis judges the rollout by the workloads' metrics: before a slot
	// is granted, and during a bake time after each node finishes, its
	// PromQL queries and alert gate are asked; a failure halts the rollout
	// (no new slot, the AnalysisFailed condition), and what cannot be
	// evaluated holds it (docs/analysis.md).
	// +optional
	Analysis *AnalysisSpec `json:"analysis,omitempty"`
}

// AnalysisSpec is a channel's analysis: where to ask, what, and how long a
// finished wave bakes.
type AnalysisSpec struct {
	// PrometheusURL is the Prometheus (or any server speaking its HTTP
	// query API) to ask: http(s)://host:port, with a path prefix when it
	// serves under one.
	PrometheusURL string `json:"prometheusURL"`
	// Queries are the named PromQL queries, each with its condition.
	// +optional
	// +listType=atomic
	Queries []AnalysisQuery `json:"queries,omitempty"`
	// Alerts, when set, is kured's alert gate: every active alert of the
	// Prometheus (its ALERTS series) holds the rollout, except those the
	// filter ignores.
	// +optional
	Alerts *AlertGate `json:"alerts,omitempty"`
	// BakeTime: after a node's upgrade finishes, no node gets a slot for
	// this long; the analysis is asked during it and must pass at its end.
	// +optional
	BakeTime *metav1.Duration `json:"bakeTime,omitempty"`
	// Interval is how often the analysis is asked while it matters.
	// +default="10s"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`
	// Timeout bounds each query.
	// +default="10s"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// OnFailure is what a failed wave does: halt (no node gets a slot) or
	// rollback (halt, and the wave's nodes go back to the version they ran
	// before it, one slot at a time within concurrency, each drained,
	// rolled back by a rollback Job and rebooted; the analysis is asked
	// again once they are back).
	// +default="halt"
	// +optional
	OnFailure string `json:"onFailure,omitempty"`
}

// What a failed wave does (spec.analysis.onFailure).
const (
	OnFailureHalt     = "halt"
	OnFailureRollback = "rollback"
)

// AnalysisQuery is one named PromQL query and what its result must be.
type AnalysisQuery struct {
	// Name names the query in the status, Events and metrics.
	Name string `json:"name"`
	// Query is the PromQL expression, asked as an instant query; $nodes
	// stands for the nodes of the wave judged, as a regular expression
	// (node=~"$nodes").
	Query string `json:"query"`
	// Condition is "<op> <number>" with op one of < <= > >= == !=, met by
	// every series of the result (e.g. "< 0.05"), or "empty": the query
	// must return no series.
	Condition string `json:"condition"`
	// NoData says what a threshold query returning no series means: hold
	// (no data is not a pass) or pass.
	// +default="hold"
	// +optional
	NoData string `json:"noData,omitempty"`
}

// AlertGate is kured's Prometheus gate, with the meaning of kured's flags.
type AlertGate struct {
	// FilterRegexp names alerts to ignore (kured's --alert-filter-regexp),
	// e.g. ^(Watchdog|InfoInhibitor)$.
	// +optional
	FilterRegexp string `json:"filterRegexp,omitempty"`
	// FilterMatchOnly inverts the filter: only alerts whose name matches
	// it block (kured's --alert-filter-match-only).
	// +optional
	FilterMatchOnly bool `json:"filterMatchOnly,omitempty"`
	// FiringOnly: pending alerts do not block, only firing ones (kured's
	// --alert-firing-only).
	// +optional
	FiringOnly bool `json:"firingOnly,omitempty"`
}

// PrestageSpec is how the nodes stage a release ahead of their slot.
type PrestageSpec struct {
	// Concurrency is the most nodes that stage at the same time. Unset: a
	// quarter of the channel's nodes rounded up, but at least twice
	// concurrency; 0 turns staging ahead off (the slot's Job downloads the
	// release itself).
	// +k8s:validation:minimum=0
	// +optional
	Concurrency *int `json:"concurrency,omitempty"`
}

// SecretKeyRef names one key of a Secret in the channel's namespace.
type SecretKeyRef struct {
	// Name of the Secret.
	Name string `json:"name"`
	// Key in the Secret's data.
	// +default="token"
	// +optional
	Key string `json:"key,omitempty"`
}

// ResolvedRelease is a release resolved once per rollout by the agent
// holding the channel's Lease, so that the upgrade Jobs do not each ask
// the release API.
type ResolvedRelease struct {
	// Version is the release's version (its tag).
	Version string `json:"version"`
	// Source is the channel URL the upgrade Jobs download this version's
	// artifacts from (for a GitHub channel: the release's download base,
	// https://github.com/owner/repo/releases, read without the API).
	Source string `json:"source"`
	// At is when it was resolved.
	// +optional
	At metav1.Time `json:"at,omitempty"`
}

// Window is a recurring maintenance window in which upgrades may start.
type Window struct {
	// Days of the week the window is open (Mon, Tue, ... or Monday, ...); empty means every day.
	// +optional
	// +listType=atomic
	Days []string `json:"days,omitempty"`
	// Start of the window, "HH:MM" in timeZone.
	// +optional
	Start string `json:"start,omitempty"`
	// End of the window, "HH:MM" in timeZone; an end before the start spans midnight.
	// +optional
	End string `json:"end,omitempty"`
	// TimeZone is an IANA zone name such as Europe/Berlin; empty means UTC.
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
}

// DrainSpec is the drain policy applied before a node reboots.
type DrainSpec struct {
	// Enabled drains the node (cordon and evict its pods) before the reboot.
	// +default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// Timeout bounds the drain; when it passes the pods left are deleted if
	// force is set, otherwise the upgrade fails and the node is uncordoned.
	// +default="10m"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// GracePeriodSeconds overrides each pod's termination grace period; unset keeps the pod's own.
	// +optional
	GracePeriodSeconds *int64 `json:"gracePeriodSeconds,omitempty"`
	// DeleteEmptyDirData evicts pods that use emptyDir volumes (their data is lost).
	// +optional
	DeleteEmptyDirData bool `json:"deleteEmptyDirData,omitempty"`
	// IgnoreDaemonSets leaves DaemonSet pods running instead of refusing to drain.
	// +default=true
	// +optional
	IgnoreDaemonSets *bool `json:"ignoreDaemonSets,omitempty"`
	// Force deletes pods whose eviction is still refused when the timeout passes,
	// and pods no controller owns.
	// +optional
	Force bool `json:"force,omitempty"`
	// PodSelector is a label selector; only matching pods are evicted.
	// +optional
	PodSelector string `json:"podSelector,omitempty"`
}

// Components selects the parts of the OS an upgrade replaces.
type Components struct {
	// Rootfs replaces the k3os root filesystem.
	// +default=true
	// +optional
	Rootfs *bool `json:"rootfs,omitempty"`
	// Kernel replaces the kernel and initrd.
	// +default=true
	// +optional
	Kernel *bool `json:"kernel,omitempty"`
	// K3s replaces the k3s binary.
	// +default=false
	// +optional
	K3s *bool `json:"k3s,omitempty"`
}

// UpdateChannelStatus is the observed state of an UpdateChannel, written by the agents.
type UpdateChannelStatus struct {
	// ObservedGeneration is the metadata.generation the status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Polling names the one node that currently resolves the channel's latest version.
	// +optional
	Polling *Poller `json:"polling,omitempty"`
	// Updating holds the slots: the nodes upgrading now, never more than concurrency.
	// +optional
	// +listType=atomic
	Updating []Slot `json:"updating,omitempty"`
	// LatestVersion is the newest version the channel offered at the last poll.
	// +optional
	LatestVersion string `json:"latestVersion,omitempty"`
	// LastPolled is when the channel was last polled successfully.
	// +optional
	LastPolled *metav1.Time `json:"lastPolled,omitempty"`
	// Counts summarises the selected nodes.
	// +optional
	Counts NodeCounts `json:"counts,omitempty"`
	// Failed lists the nodes whose last upgrade failed, with why.
	// +optional
	// +listType=atomic
	Failed []Failure `json:"failed,omitempty"`
	// Conditions: Polled, Progressing, Complete, Degraded, Invalid.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Skipped lists the selected nodes behind the target that get no slot,
	// and why: not Ready, made unschedulable by an admin, no agent running,
	// no version ever published, or followed by an earlier channel. They do
	// not count toward maxFailures.
	// +optional
	// +listType=atomic
	Skipped []SkippedNode `json:"skipped,omitempty"`
	// Staging holds the staging permits: the nodes that download and verify
	// the target ahead of their slot now, never more than
	// spec.prestage.concurrency. Each node removes its own permit when done.
	// +optional
	// +listType=atomic
	Staging []StagePermit `json:"staging,omitempty"`
	// Resolved is the target release as resolved for this rollout (GitHub
	// channels): the upgrade Jobs read its artifacts from its source.
	// +optional
	Resolved *ResolvedRelease `json:"resolved,omitempty"`
	// Analysis is the state of spec.analysis: the wave it judges next and
	// the failure that halted the rollout.
	// +optional
	Analysis *AnalysisStatus `json:"analysis,omitempty"`
}

// AnalysisStatus is what the analysis of a channel remembers.
type AnalysisStatus struct {
	// Wave is the nodes whose upgrade finished since the analysis last
	// passed: the nodes its queries' $nodes stands for.
	// +optional
	// +listType=atomic
	Wave []string `json:"wave,omitempty"`
	// WaveVersion is the version the wave runs.
	// +optional
	WaveVersion string `json:"waveVersion,omitempty"`
	// BakeUntil is when the wave's bake ends.
	// +optional
	BakeUntil *metav1.Time `json:"bakeUntil,omitempty"`
	// Failed is the failure that halted the rollout: no node gets a slot
	// until the target version changes (or an admin removes it, or
	// resumes the channel with the ops.slipway.dev/resume annotation).
	// +optional
	Failed *AnalysisFailure `json:"failed,omitempty"`
	// Previous are the versions the wave's nodes ran before it: what a
	// rollback of the wave returns them to.
	// +optional
	// +listType=atomic
	Previous []NodeVersion `json:"previous,omitempty"`
	// Rollback is the rollback of the failed wave (spec.analysis.onFailure: rollback).
	// +optional
	Rollback *WaveRollback `json:"rollback,omitempty"`
	// Resumed is the last value of the ops.slipway.dev/resume annotation
	// acted on: a new value lifts the halt once.
	// +optional
	Resumed string `json:"resumed,omitempty"`
}

// NodeVersion is the version one node ran.
type NodeVersion struct {
	// Node is the exact name of the node.
	Node string `json:"node"`
	// Version it ran.
	Version string `json:"version"`
}

// WaveRollback is the rollback of a failed wave: each node's state, and
// what the analysis said once they were back.
type WaveRollback struct {
	// Version is the version of the failed wave, rolled back from.
	Version string `json:"version"`
	// State is RollingBack (nodes still to go back), RolledBack (every node
	// is back or reported), Cured (the analysis passed after it) or
	// NotCured (it still fails after it).
	State string `json:"state"`
	// Nodes are the wave's nodes and how their rollback went.
	// +listType=atomic
	Nodes []NodeRollback `json:"nodes"`
	// RolledBack counts the nodes back at their previous version.
	// +optional
	RolledBack int `json:"rolledBack,omitempty"`
	// Finished is when every node was back or reported.
	// +optional
	Finished *metav1.Time `json:"finished,omitempty"`
	// Verdict is the analysis asked after the rollback (Pass, Fail, Hold;
	// empty: not asked yet), and Message what it said.
	// +optional
	Verdict string `json:"verdict,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// JudgedAt is when the analysis after the rollback was last asked.
	// +optional
	JudgedAt *metav1.Time `json:"judgedAt,omitempty"`
}

// NodeRollback is one node of a rolled back wave.
type NodeRollback struct {
	// Node is the exact name of the node.
	Node string `json:"node"`
	// From is the version it ran in the failed wave; To the one it goes back to.
	From string `json:"from"`
	// +optional
	To string `json:"to,omitempty"`
	// State is Pending, RollingBack, RolledBack or Failed.
	State string `json:"state"`
	// Message says what was seen (why it failed, what it runs now).
	// +optional
	Message string `json:"message,omitempty"`
	// At is when the state was last set.
	// +optional
	At metav1.Time `json:"at,omitempty"`
}

// AnalysisFailure is a failed analysis: which query, its value, and the
// wave it failed after.
type AnalysisFailure struct {
	// Query is the name of the query that failed.
	Query string `json:"query"`
	// Expr is the expression asked ($nodes expanded).
	// +optional
	Expr string `json:"expr,omitempty"`
	// Value is the offending value (or series).
	// +optional
	Value string `json:"value,omitempty"`
	// Reason says what was seen.
	Reason string `json:"reason"`
	// Nodes are the nodes of the failed wave.
	// +listType=atomic
	Nodes []string `json:"nodes"`
	// Version is the version the wave runs.
	// +optional
	Version string `json:"version,omitempty"`
	// At is when the failure was seen.
	At metav1.Time `json:"at"`
}

// SkippedNode is a node the channel passes over, with why.
type SkippedNode struct {
	// Node is the exact name of the node.
	Node string `json:"node"`
	// Reason is one word: NotReady, Unschedulable, NoAgent, UnknownVersion or OtherChannel.
	Reason string `json:"reason"`
	// Message says what was seen and what to do.
	// +optional
	Message string `json:"message,omitempty"`
	// Since is when the node was first skipped for this reason.
	// +optional
	Since metav1.Time `json:"since,omitempty"`
}

// StagePermit lets one node stage a version ahead of its slot.
type StagePermit struct {
	// Node is the exact name of the staging node.
	Node string `json:"node"`
	// Version the node stages.
	Version string `json:"version"`
	// Since is when the permit was given.
	// +optional
	Since metav1.Time `json:"since,omitempty"`
}

// Poller is the node that holds the polling slot.
type Poller struct {
	// Node is the exact name of the polling node.
	Node string `json:"node"`
	// Since is when the node took the polling slot.
	// +optional
	Since metav1.Time `json:"since,omitempty"`
}

// Slot is one node's claim to upgrade.
type Slot struct {
	// Node is the exact name of the upgrading node.
	Node string `json:"node"`
	// Version the node is upgrading to.
	Version string `json:"version"`
	// Job is the name of the upgrade Job, once created.
	// +optional
	Job string `json:"job,omitempty"`
	// Phase is the step the node is at (for example Upgrading, Draining, Rebooting, WaitingReady).
	// +optional
	Phase string `json:"phase,omitempty"`
	// Message says what the slot's last step did: the drain's outcome
	// (how long it took, the pods evicted) once the slot is Rebooting.
	// +optional
	Message string `json:"message,omitempty"`
	// Attempt counts the tries of this node at this version, starting at 1.
	// +optional
	Attempt int `json:"attempt,omitempty"`
	// From is the version the node ran when the slot was granted.
	// +optional
	From string `json:"from,omitempty"`
	// Rollback marks the slot of a failed wave's node going back to
	// version (its previous) with a rollback Job (`ops rollback`), drained
	// and rebooted as an upgrade is.
	// +optional
	Rollback bool `json:"rollback,omitempty"`
	// Since is when the slot was taken.
	// +optional
	Since metav1.Time `json:"since,omitempty"`
}

// NodeCounts counts the nodes a channel selects.
type NodeCounts struct {
	// Nodes is how many nodes the channel selects.
	Nodes int `json:"nodes"`
	// UpToDate is how many of them run the target version.
	UpToDate int `json:"upToDate"`
	// Updating is how many hold a slot.
	Updating int `json:"updating"`
	// Failed is how many failed their last upgrade.
	Failed int `json:"failed"`
	// Skipped is how many are passed over (see status.skipped).
	// +optional
	Skipped int `json:"skipped,omitempty"`
	// Staged is how many nodes behind the target have it staged (downloaded
	// and verified, not yet active).
	// +optional
	Staged int `json:"staged,omitempty"`
}

// Failure records a node whose upgrade failed.
type Failure struct {
	// Node is the exact name of the node.
	Node string `json:"node"`
	// Version it failed to reach.
	Version string `json:"version"`
	// Reason says what went wrong and what to do.
	Reason string `json:"reason"`
	// At is when the last attempt failed.
	At metav1.Time `json:"at"`
	// Attempts counts the failed tries of this node at this version.
	Attempts int `json:"attempts"`
}
