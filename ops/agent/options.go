// Package agent is the node agent, `slipway ops agent` (a DaemonSet): one
// runs on every node and acts on its own host only. It reads its own Node,
// where the controller (ops/controller) writes it a view of every channel
// that concerns it (protocol.View: the spec, the target, the node's slot
// and staging permit); no agent reads a channel. It publishes its node's
// versions (what the boot runs, what is staged), renews its heartbeat
// Lease, stages ahead under a permit, and when its node holds a slot runs
// the upgrade Job, asks the controller for the drain, reboots once its view
// says Rebooting, waits for Ready and ends the slot, reporting each step
// on its own Node (protocol.Reports), which the controller folds into the
// channel's status. It rolls back a swap its rollout left staged, and
// uncordons its node when no slot holds it. Decisions live in ops/plan;
// this package wires them to the API and the host.
package agent

import (
	"fmt"
	"log/slog"
	"time"

	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/process"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/upgrade/reboot"
	"slipway.dev/slipway/version"
)

// Options configure an agent.
type Options struct {
	// NodeName is the node this agent runs on (required; NODE_NAME).
	NodeName string
	// Namespace holds the UpdateChannels, Jobs, Leases and Events.
	Namespace string
	// SystemDir is where this process reads the node's system directory.
	SystemDir string
	// HostSystemDir is the system directory's path on the host: the hostPath the upgrade Job mounts.
	HostSystemDir string
	// HostLockDir is the host directory of the upgrade lock, mounted into the Job (default /run/k3os).
	HostLockDir string
	// Image runs the upgrade Job when the channel names none.
	Image string
	// UpgradeCommand is the Job container's command before "ops upgrade ..." (default ["slipway"]).
	UpgradeCommand []string
	// InstallCRDs creates or updates the CRDs at start.
	InstallCRDs bool
	// Rebooter restarts the node (required).
	Rebooter reboot.Rebooter
	// BootIDFile holds an ID that changes with every boot (default /proc/sys/kernel/random/boot_id).
	BootIDFile string
	// RebootStall is how long a requested reboot may take before the agent,
	// still on the same boot, reports it (Event RebootStalled) and asks
	// again (default 10m).
	RebootStall time.Duration
	// RebootEscalation forces a reboot that a signalled init did not carry
	// out within RebootEscalateAfter (PID 1 stuck in its shutdown: a
	// service that never stops): sync, then reboot(2) (reboot.Syscall).
	// nil: never (simulated nodes, a reboot command of the operator's).
	RebootEscalation reboot.Rebooter
	// RebootEscalateAfter is how long after a reboot request, still on the
	// same boot, the escalation runs (default 2×RebootStall).
	RebootEscalateAfter time.Duration
	// BootRecordDir is a directory every boot clears (the host's /run/k3os,
	// a tmpfs) where the agent records what each boot runs, beside the
	// Node: a Node deleted and registered again loses its record, and an
	// agent restarted on the same boot would otherwise take a swap staged
	// since the boot began for what runs. "" records nothing there.
	BootRecordDir string
	// CmdlineFile is the kernel command line (default /proc/cmdline): a
	// slipway.rootfs= on it names the rootfs the boot loader chose.
	CmdlineFile string
	// BootIDFromNode reads the boot ID from the Node's status.nodeInfo.bootID
	// instead of BootIDFile: for simulated nodes whose supervisor sets it
	// before it restarts the agent. (A real kubelet may report it only after
	// the agent started, so real nodes use the file.)
	BootIDFromNode bool
	// MetricsAddr serves Prometheus metrics at /metrics ("" = off).
	MetricsAddr string
	// GitHubToken authenticates github-releases:// polls (raises the rate limit).
	GitHubToken string
	// GitHubBaseURL replaces https://api.github.com/ for release resolution
	// (GitHub Enterprise, tests).
	GitHubBaseURL string
	// Config reaches the API server (required).
	Config *rest.Config
	// Retry is the backoff for failed nodes (default plan.DefaultRetry).
	Retry plan.Retry
	// Resync re-reads the fleet view at least this often (default 30s).
	Resync time.Duration
	// LeaseDuration of the per-channel Lease (default 15s; renew at 2/3, retry at 1/5).
	LeaseDuration time.Duration
	// HeartbeatInterval is how often the agent renews its heartbeat Lease
	// (default 1m); a node whose agent missed three is skipped.
	HeartbeatInterval time.Duration
	// WorkWatchLinger is how long the watches of this node's Node, Jobs and
	// their pods stay open after its last work (default 5m; workwatch.go).
	WorkWatchLinger time.Duration
	// NodeOnly makes the agent speak the protocol of the previous release:
	// it reads its views on its Node and reports there, and never reads or
	// writes its NodeUpdate (for tests and benchmarks of a fleet mid-upgrade).
	NodeOnly bool
	// Protocol is the NodeUpdate protocol the agent speaks (default
	// protocol.Protocol). protocol.NodeUpdateProtocol (2) is the release
	// that keeps its versions, boot ID and staged versions on its Node and
	// writes them into its status only with its reports (for tests of a
	// fleet mid-upgrade).
	Protocol int
	// LoopAllowance is how long the workers may go without taking a pulse
	// before /healthz fails (default 2m; a drain runs in one worker while
	// the other takes the pulses).
	LoopAllowance time.Duration
	// Log receives structured logs (default slog.Default()).
	Log *slog.Logger
	// Isolation is how the manifest confines the agent (process.IsolationPolicy
	// or process.IsolationWebhook; default: what process.IsolationEnv says).
	// Under the webhook isolation the upgrade Jobs also carry AppArmor's
	// beta annotation, which API servers before 1.30 read (confineJob).
	Isolation string
}

func (o Options) withDefaults() (Options, error) {
	if o.NodeName == "" {
		return o, fmt.Errorf("the agent needs its node's name: set --node-name or NODE_NAME (the DaemonSet passes spec.nodeName)")
	}
	if o.Config == nil {
		return o, fmt.Errorf("the agent needs a connection to the API server: run it in the cluster or pass --kubeconfig")
	}
	if o.Rebooter == nil {
		return o, fmt.Errorf("the agent needs a way to reboot: choose --reboot-method")
	}
	if o.Namespace == "" {
		o.Namespace = "slipway-system"
	}
	if o.SystemDir == "" {
		o.SystemDir = "/k3os/system"
	}
	if o.HostSystemDir == "" {
		o.HostSystemDir = "/k3os/system"
	}
	if o.HostLockDir == "" {
		o.HostLockDir = "/run/k3os"
	}
	if len(o.UpgradeCommand) == 0 {
		o.UpgradeCommand = []string{"slipway"}
	}
	if o.BootIDFile == "" {
		o.BootIDFile = "/proc/sys/kernel/random/boot_id"
	}
	if o.RebootStall <= 0 {
		o.RebootStall = 10 * time.Minute
	}
	if o.RebootEscalateAfter <= 0 {
		o.RebootEscalateAfter = 2 * o.RebootStall
	}
	if o.CmdlineFile == "" {
		o.CmdlineFile = "/proc/cmdline"
	}
	if o.Retry.Base <= 0 {
		o.Retry = plan.DefaultRetry
	}
	if o.WorkWatchLinger <= 0 {
		o.WorkWatchLinger = defaultWorkWatchLinger
	}
	var err error
	if o.Protocol, err = protocol.Spoken(o.Protocol); err != nil {
		return o, fmt.Errorf("the agent: %w", err)
	}
	process.Timings(&o.Resync, &o.LeaseDuration, &o.HeartbeatInterval, &o.LoopAllowance)
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Isolation == "" {
		var err error
		if o.Isolation, err = process.Isolation(); err != nil {
			return o, err
		}
	}
	if o.Isolation != process.IsolationPolicy && o.Isolation != process.IsolationWebhook {
		return o, fmt.Errorf("isolation %q: want %q or %q", o.Isolation, process.IsolationPolicy, process.IsolationWebhook)
	}
	// Names the node in the API server's audit log: which agent wrote what.
	o.Config = process.ClientConfig(o.Config, fmt.Sprintf("slipway-agent/%s node/%s", version.Version, o.NodeName))
	return o, nil
}

// defaultWorkWatchLinger: a slot's Job and reboot, and the agent's end
// report, come well within it; a rollout's next wave finds them open.
const defaultWorkWatchLinger = 5 * time.Minute

// Defaults returns the Options defaults that have no natural zero value
// (Resync, LeaseDuration, Retry), for flag help.
func Defaults() Options {
	return Options{Resync: 30 * time.Second, LeaseDuration: 15 * time.Second, Retry: plan.DefaultRetry, RebootStall: 10 * time.Minute,
		WorkWatchLinger: defaultWorkWatchLinger}
}
