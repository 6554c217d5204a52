package monitor

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"slipway.dev/slipway/ops/swarm/appcheck"
)

// Names of the invariants, as recorded in a Violation.
const (
	InvChannelConcurrency = "channel-concurrency"           // per UpdateChannel, at most concurrency nodes unavailable
	InvControlPlane       = "control-plane-one-down"        // at most one control-plane node unavailable
	InvRebootWithoutDrain = "reboot-without-drain"          // a new boot ID only on a node slipway cordoned
	InvRebootWithoutSlot  = "reboot-without-slot"           // a new boot ID on a channel's node only while a channel held its slot
	InvOperatorInFlight   = "update-operator-max-in-flight" // at most max-concurrent nodes in flight
	InvHotLoop            = "bounded-writes"                // at most MaxWrites writes of one object per window
	InvDoubleHeld         = "swarm-no-double-holder"        // no job in two applications' hands
	InvCordonBudget       = "cordon-within-budget"          // slipway cordons a channel's node only while fewer than concurrency others are unavailable
	InvCordonControlPlane = "cordon-control-plane-alone"    // slipway cordons a control-plane node only while no other is unavailable
	InvCanaryConfined     = "eds-canary-confined"           // no pod of a not-yet-validated template outside its canary nodes
)

// Finding is one invariant broken in one place. Key says where (a channel, a
// node, an object, a job): a violation that persists is recorded once per
// key, and again only after it cleared.
type Finding struct {
	Invariant string
	Key       string
	Message   string
	// Objects are the keys (kind/namespace/name) whose history the
	// violation records.
	Objects []string
}

// NodeObs is what the monitor observed of a Node at its latest version.
type NodeObs struct {
	Name   string
	Labels map[string]string
	// Ready is the Ready condition True. A node without one is not ready.
	Ready bool
	// Unschedulable is spec.unschedulable.
	Unschedulable bool
	// CordonedBy is slipway's cordon record (drain.AnnotationCordonedBy),
	// "" when slipway holds no cordon.
	CordonedBy string
	BootID     string
	// Version is the release the node runs as its agent publishes it
	// (its NodeUpdate's status.booted, else its rootfs-version
	// annotation): what the controller reads.
	Version string
	// ReadySince is when the monitor saw the node become Ready (zero for
	// a node Ready when first seen).
	ReadySince time.Time
	// Operator is the node's update operator protocol annotations.
	Operator OperatorView
	// InFlight: the update operator counts the node against max-concurrent
	// (updateoperator.InFlight over its annotations).
	InFlight bool
	// NotReadySince is when the monitor saw the node go NotReady (zero
	// while Ready); WantedSince when it saw the update operator's current
	// action-wanted first.
	NotReadySince, WantedSince time.Time
}

// SlipwayCordoned reports a cordon slipway holds: unschedulable, and
// recorded as slipway's.
func (n NodeObs) SlipwayCordoned() bool { return n.Unschedulable && n.CordonedBy != "" }

// ControlPlane reports the node-role.kubernetes.io/control-plane label.
func (n NodeObs) ControlPlane() bool {
	_, ok := n.Labels["node-role.kubernetes.io/control-plane"]
	return ok
}

// Unavailable is a node out of service for the fleet-safety invariants:
// cordoned by slipway, or NotReady (a rebooting node is NotReady).
func (n NodeObs) Unavailable() bool { return n.SlipwayCordoned() || !n.Ready }

func (n NodeObs) why() string {
	var w []string
	if n.SlipwayCordoned() {
		w = append(w, "cordoned by "+n.CordonedBy)
	}
	if !n.Ready {
		w = append(w, "NotReady")
	}
	return strings.Join(w, ", ")
}

// ChannelObs is what the monitor observed of an UpdateChannel.
type ChannelObs struct {
	Namespace   string
	Name        string
	Concurrency int // spec.concurrency; 0 means the default, 1
	// Selector is spec.nodeSelector; nil selects every node.
	Selector *metav1.LabelSelector
	// Slots are the nodes of status.updating.
	Slots []string
}

// Reboot is a boot ID change of a node, with what was seen just around it.
type Reboot struct {
	Node     string
	From, To string
	At       time.Time
	// Cordoned: slipway held the node's cordon in the last version seen
	// before the change, or in the version that carries the new boot ID
	// (the drain's cordon stays until the node is back).
	Cordoned bool
	// Slot: an UpdateChannel's status.updating listed the node in the
	// last version of the node seen before the change, in the one that
	// carries the new boot ID, or in a channel version seen between the
	// two (the controller held its slot at that moment, as the monitor
	// can tell).
	Slot bool
	// Channels are the UpdateChannels whose nodeSelector selects the
	// node when the change is seen ("namespace/name"): none, the node
	// is no k3os channel's and reboot-without-slot does not judge it.
	Channels []string
}

// CordonStart is a node seen cordoned by slipway in a version after one
// that was not (or in its first version seen).
type CordonStart struct {
	Node string
	At   time.Time
}

// PodObs is what the monitor observed of a pod of an ExtendedDaemonSet
// (labelled with its name and replica set).
type PodObs struct {
	Namespace, Name string
	Node            string
	// EDS and ReplicaSet are the pod's eds.slipway.dev/name and
	// eds.slipway.dev/replicaset labels.
	EDS, ReplicaSet string
	Terminating     bool
	// Ready is the pod's Ready condition True.
	Ready bool
	// FirstSeen is when the monitor first saw the pod.
	FirstSeen time.Time
}

// EDSObs is what the monitor observed of an ExtendedDaemonSet's status.
type EDSObs struct {
	Namespace, Name string
	// Active is status.activeReplicaSet; CanaryReplicaSet and CanaryNodes
	// are status.canary's ("" and nil with no canary).
	Active           string
	CanaryReplicaSet string
	CanaryNodes      []string
	// MaxUnavailable is spec.strategy.rollingUpdate.maxUnavailable (nil:
	// the default, 1).
	MaxUnavailable *intstr.IntOrString
	// Validated are the replica sets the monitor saw active (validated
	// templates: an older one's pods are replaced by the rolling update,
	// wherever they run).
	Validated map[string]bool
	// CanaryOn are, per replica set, the nodes its canary was ever seen
	// on: a failed canary's pods stay there until the rollback deletes
	// them, after the status no longer names the canary.
	CanaryOn map[string]map[string]bool
	// Covered are the nodes the monitor saw a Ready pod of it on (until
	// the Node is deleted).
	Covered map[string]bool
}

// State is what the invariants read: the monitor's observed state.
type State struct {
	Now   time.Time
	Nodes map[string]NodeObs
	// NodeList is Nodes sorted by name, when the caller keeps it (the
	// monitor does, rebuilt only when a node changes); nil: sorted on use.
	NodeList []NodeObs
	Channels []ChannelObs
	// Reboots observed since the last check.
	Reboots []Reboot
	// Cordons are the slipway cordons begun since the last check; Nodes
	// already holds each one's cordon.
	Cordons []CordonStart
	// Writes are the times of each object's observed versions (object key
	// to times, oldest first), as kept by the monitor over its window.
	Writes map[string][]time.Time
	// Apps is the latest report of the swarm applications (nil: none).
	Apps appcheck.Sample
	// Pods are the ExtendedDaemonSets' pods; EDS their status, by
	// namespace/name.
	Pods []PodObs
	EDS  map[string]EDSObs
	// Jobs must all run in the applications' hands from JobsDue on (zero:
	// not checked); see ExpectJobs.
	Jobs    []string
	JobsDue time.Time
	// Requests are the times of the write requests each object received
	// (object key to times, sorted), from the audit log, over the last
	// few windows.
	Requests map[string][]time.Time
	// ReleaseFailures are every release failure observed, in order;
	// ReleaseStarts and ReleaseFinishes those observed since the last
	// check.
	ReleaseFailures []ReleaseFailure
	ReleaseStarts   []ReleaseStart
	ReleaseFinishes []ReleaseFinish
	// SlotGrants are the UpdateChannel slots granted since the last check;
	// GateStarts the update operator's starts not judged yet by
	// analysis-gate; Fleet the versions of its fleet state seen, oldest
	// first.
	SlotGrants []SlotGrant
	GateStarts []ReleaseStart
	Fleet      []FleetObs
	// AgentBeats are the k3os agents' heartbeat Leases as the monitor saw
	// them renewed, by node; AgentBlames the controller's sayings since the
	// last check that an agent is silent (agentbeat.go).
	AgentBeats  map[string]AgentBeats
	AgentBlames []AgentBlame
	// SlotEnds are the UpdateChannel slots seen ending and not judged to
	// the end yet; FailureGrants the slots granted since the last check;
	// SlotReports the nodes' slot reports by node and channel UID;
	// SlotReleases the channels' recent SlotReleased Events (failures.go).
	SlotEnds      []SlotEnd
	FailureGrants []FailureGrant
	SlotReports   map[string]map[types.UID]SlotReportObs
	SlotReleases  []SlotReleasedEvent
	// FailureDrops are the failures seen leaving status.failed and not
	// judged to the end yet; Deleted when each node was last seen deleted.
	FailureDrops []FailureDrop
	Deleted      map[string]time.Time
}

// Limits are the bounds the invariants check that the API server does not
// show (flags of the processes under test).
type Limits struct {
	// OperatorMaxConcurrent is the update operator's --max-concurrent; 0:
	// the invariant is not checked.
	OperatorMaxConcurrent int
	// OperatorHaltAfter is the update operator's --halt-after; 0: the
	// brake is not checked. BrakeGrace is how long after the failure that
	// halts a release a start is not judged (default 3s).
	OperatorHaltAfter int
	BrakeGrace        time.Duration
	// MaxWrites is the most versions of one object within Window (default
	// 20 in 1s).
	MaxWrites int
	Window    time.Duration
	// MaxWriteRequests is the most write requests one object may receive
	// within Window, refused ones included (default 20).
	MaxWriteRequests int
	// CanaryGrace is how long a pod may stand before eds-canary-confined
	// judges it (default 2s): the pod and its ExtendedDaemonSet's status
	// arrive on two watches, in either order.
	CanaryGrace time.Duration
	// NodeGrace is how long a node must have been Ready again before
	// eds-max-unavailable counts its pod (default 20s).
	NodeGrace time.Duration
	// OperatorStateTimeout is the update operator's --state-timeout (the
	// longer of it and --drain-timeout); 0: update-operator-notready-slot
	// is not checked. SlotGrace is how long past it the rule waits
	// (default 15s).
	OperatorStateTimeout time.Duration
	SlotGrace            time.Duration
	// GateGrace is how long after an update operator's start analysis-gate
	// waits for a fleet state that lifted its hold (default 2s).
	GateGrace time.Duration
	// CountGrace is how long an UpdateChannel slot that ended uncounted
	// may wait for what explains it (every-failure-counted; default 10s).
	CountGrace time.Duration
}

func (l Limits) withDefaults() Limits {
	if l.MaxWrites <= 0 {
		l.MaxWrites = 20
	}
	if l.MaxWriteRequests <= 0 {
		l.MaxWriteRequests = 20
	}
	if l.Window <= 0 {
		l.Window = time.Second
	}
	if l.CanaryGrace <= 0 {
		l.CanaryGrace = 2 * time.Second
	}
	if l.BrakeGrace <= 0 {
		l.BrakeGrace = defaultBrakeGracing
	}
	if l.NodeGrace <= 0 {
		l.NodeGrace = defaultNodeGrace
	}
	if l.SlotGrace <= 0 {
		l.SlotGrace = defaultSlotGrace
	}
	if l.GateGrace <= 0 {
		l.GateGrace = defaultGateGrace
	}
	if l.CountGrace <= 0 {
		l.CountGrace = defaultCountGrace
	}
	return l
}

// Invariant is a pure check over the observed state.
type Invariant struct {
	Name  string
	Check func(State, Limits) ([]Finding, error)
}

// Invariants are the checks the monitor runs, in order.
var Invariants = []Invariant{
	{InvChannelConcurrency, ChannelConcurrency},
	{InvControlPlane, ControlPlaneOneDown},
	{InvRebootWithoutDrain, RebootWithoutDrain},
	{InvRebootWithoutSlot, RebootWithoutSlot},
	{InvOperatorInFlight, OperatorInFlight},
	{InvHotLoop, HotLoops},
	{InvDoubleHeld, DoubleHeld},
	{InvCordonBudget, CordonWithinBudget},
	{InvCordonControlPlane, CordonControlPlaneAlone},
	{InvCanaryConfined, CanaryConfined},
	{InvEDSMaxUnavailable, EDSMaxUnavailable},
	{InvJobsRunning, JobsRunning},
	{InvWriteRequests, WriteRequests},
	{InvOperatorBrake, OperatorBrake},
	{InvFallbackFailure, FallbackIsFailure},
	{InvOperatorNotReadySlot, OperatorNotReadySlot},
	{InvAnalysisGate, AnalysisGate},
	{InvNoAgentWhileRenewing, NoAgentWhileRenewing},
	{InvFailureCounted, FailureCounted},
}

func nodeKey(name string) string { return "Node//" + name }

// selects reports whether channel c's nodeSelector selects a node
// labelled lbls (nil selects every node; a selector that does not parse
// selects none).
func (c ChannelObs) selects(lbls map[string]string) bool {
	if c.Selector == nil {
		return true
	}
	sel, err := metav1.LabelSelectorAsSelector(c.Selector)
	return err == nil && sel.Matches(labels.Set(lbls))
}

func sortedNodes(s State) []NodeObs {
	if s.NodeList != nil {
		return s.NodeList
	}
	out := make([]NodeObs, 0, len(s.Nodes))
	for _, n := range s.Nodes {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b NodeObs) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// channelNodes are the nodes a channel names (those its nodeSelector
// selects, and those holding one of its slots) that keep accepts.
func channelNodes(c ChannelObs, s State, keep func(NodeObs) bool) ([]NodeObs, error) {
	sel := labels.Everything()
	if c.Selector != nil {
		var err error
		if sel, err = metav1.LabelSelectorAsSelector(c.Selector); err != nil {
			return nil, fmt.Errorf("channel %s: nodeSelector: %w", c.Name, err)
		}
	}
	var out []NodeObs
	for _, n := range sortedNodes(s) {
		if keep(n) && (sel.Matches(labels.Set(n.Labels)) || slices.Contains(c.Slots, n.Name)) {
			out = append(out, n)
		}
	}
	return out, nil
}

// ChannelConcurrency: per UpdateChannel, never more than concurrency of its
// nodes unavailable (cordoned by slipway, or NotReady).
func ChannelConcurrency(s State, _ Limits) ([]Finding, error) {
	var out []Finding
	for _, c := range s.Channels {
		nodes, err := channelNodes(c, s, NodeObs.Unavailable)
		if err != nil {
			return nil, err
		}
		limit := max(c.Concurrency, 1)
		var down, objs []string
		for _, n := range nodes {
			down = append(down, n.Name+" ("+n.why()+")")
			objs = append(objs, nodeKey(n.Name))
		}
		if len(down) > limit {
			out = append(out, Finding{Invariant: InvChannelConcurrency, Key: c.Namespace + "/" + c.Name,
				Message: fmt.Sprintf("channel %s/%s: %d nodes unavailable, concurrency %d: %s", c.Namespace, c.Name, len(down), limit, strings.Join(down, "; ")),
				Objects: append([]string{"UpdateChannel/" + c.Namespace + "/" + c.Name}, objs...)})
		}
	}
	return out, nil
}

// ControlPlaneOneDown: across all channels, never more than one
// control-plane node (of those any channel names) unavailable, NotReady
// ones included.
func ControlPlaneOneDown(s State, _ Limits) ([]Finding, error) {
	named := map[string]bool{}
	for _, c := range s.Channels {
		nodes, err := channelNodes(c, s, func(n NodeObs) bool { return n.ControlPlane() && n.Unavailable() })
		if err != nil {
			return nil, err
		}
		for _, n := range nodes {
			named[n.Name] = true
		}
	}
	var down, objs []string
	for _, n := range sortedNodes(s) {
		if named[n.Name] {
			down = append(down, n.Name+" ("+n.why()+")")
			objs = append(objs, nodeKey(n.Name))
		}
	}
	if len(down) > 1 {
		return []Finding{{Invariant: InvControlPlane, Key: "control-plane",
			Message: fmt.Sprintf("%d control-plane nodes unavailable: %s", len(down), strings.Join(down, "; ")), Objects: objs}}, nil
	}
	return nil, nil
}

// RebootWithoutDrain: a node's boot ID changes only while slipway holds its
// cordon (a drain that finished: the cordon comes first). Each such
// reboot is one finding, keyed by the node and the new boot ID.
func RebootWithoutDrain(s State, _ Limits) ([]Finding, error) {
	var out []Finding
	for _, r := range s.Reboots {
		if r.From == "" || r.Cordoned {
			continue
		}
		out = append(out, Finding{Invariant: InvRebootWithoutDrain, Key: r.Node + "@" + r.To,
			Message: fmt.Sprintf("node %s booted %s (was %s) with no slipway cordon observed before", r.Node, r.To, r.From),
			Objects: []string{nodeKey(r.Node)}})
	}
	return out, nil
}

// RebootWithoutSlot: a node an UpdateChannel selects gets a new boot ID
// only while the controller holds its slot (some channel's
// status.updating lists it). The cordon alone (reboot-without-drain) is
// the agent's word; the slot is the controller's: a reboot outside one
// is a node updating beside the channel's concurrency. Each such reboot is
// one finding, keyed by the node and the new boot ID.
func RebootWithoutSlot(s State, _ Limits) ([]Finding, error) {
	var out []Finding
	for _, r := range s.Reboots {
		if r.From == "" || r.Slot || len(r.Channels) == 0 {
			continue
		}
		objs := []string{nodeKey(r.Node)}
		for _, c := range r.Channels {
			objs = append(objs, "UpdateChannel/"+c)
		}
		out = append(out, Finding{Invariant: InvRebootWithoutSlot, Key: r.Node + "@" + r.To,
			Message: fmt.Sprintf("node %s booted %s (was %s) with no slot of its channel %s held (status.updating never listed it around the change)",
				r.Node, r.To, r.From, strings.Join(r.Channels, ", ")),
			Objects: objs})
	}
	return out, nil
}

// OperatorInFlight: never more than the update operator's max-concurrent
// nodes in flight.
func OperatorInFlight(s State, l Limits) ([]Finding, error) {
	if l.OperatorMaxConcurrent <= 0 {
		return nil, nil
	}
	var in, objs []string
	for _, n := range sortedNodes(s) {
		if n.InFlight {
			in = append(in, n.Name)
			objs = append(objs, nodeKey(n.Name))
		}
	}
	if len(in) > l.OperatorMaxConcurrent {
		return []Finding{{Invariant: InvOperatorInFlight, Key: "update-operator",
			Message: fmt.Sprintf("%d nodes in flight, max-concurrent %d: %s", len(in), l.OperatorMaxConcurrent, strings.Join(in, ", ")), Objects: objs}}, nil
	}
	return nil, nil
}

// HotLoops: no object has more than MaxWrites versions within any Window
// ending now (a controller rewriting an object in a loop).
func HotLoops(s State, l Limits) ([]Finding, error) {
	l = l.withDefaults()
	var out []Finding
	for k, ts := range s.Writes {
		if len(ts) <= l.MaxWrites {
			continue
		}
		if n := maxInWindow(ts, l.Window); n > l.MaxWrites {
			out = append(out, Finding{Invariant: InvHotLoop, Key: k,
				Message: fmt.Sprintf("%s written %d times within %s (bound %d)", k, n, l.Window, l.MaxWrites), Objects: []string{k}})
		}
	}
	slices.SortFunc(out, func(a, b Finding) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// maxInWindow is the most of ts (sorted) that fall within one span of w.
func maxInWindow(ts []time.Time, w time.Duration) int {
	best, lo := 0, 0
	for hi := range ts {
		for ts[hi].Sub(ts[lo]) >= w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// DoubleHeld: no job in two swarm applications' hands at once, from what
// the applications report (appcheck.DoubleHeld).
func DoubleHeld(s State, _ Limits) ([]Finding, error) {
	d := appcheck.DoubleHeld(s.Apps)
	jobs := make([]string, 0, len(d))
	for j := range d {
		jobs = append(jobs, j)
	}
	slices.Sort(jobs)
	var out []Finding
	for _, j := range jobs {
		out = append(out, Finding{Invariant: InvDoubleHeld, Key: j,
			Message: fmt.Sprintf("job %s held by %s at once", j, strings.Join(d[j], " and "))})
	}
	return out, nil
}

// CordonWithinBudget: slipway begins a cordon on a channel's node only
// while fewer than concurrency of the channel's other nodes are
// unavailable (NotReady ones included: down is down, slot or not). Unlike
// ChannelConcurrency, a fault that takes nodes down by itself (power off,
// a network cut) breaks nothing here: only slipway's own step into a spent
// budget does. Each such cordon is one finding, keyed by node and time.
func CordonWithinBudget(s State, _ Limits) ([]Finding, error) {
	var out []Finding
	for _, cs := range s.Cordons {
		for _, c := range s.Channels {
			nodes, err := channelNodes(c, s, func(n NodeObs) bool { return n.Name == cs.Node || n.Unavailable() })
			if err != nil {
				return nil, err
			}
			var mine bool
			var down, objs []string
			for _, n := range nodes {
				if n.Name == cs.Node {
					mine = true
					continue
				}
				down = append(down, n.Name+" ("+n.why()+")")
				objs = append(objs, nodeKey(n.Name))
			}
			limit := max(c.Concurrency, 1)
			if mine && len(down) >= limit {
				out = append(out, Finding{Invariant: InvCordonBudget, Key: cs.Node + "@" + cs.At.UTC().Format(time.RFC3339Nano),
					Message: fmt.Sprintf("slipway cordoned %s of channel %s/%s while %d of its other nodes were unavailable, concurrency %d: %s",
						cs.Node, c.Namespace, c.Name, len(down), limit, strings.Join(down, "; ")),
					Objects: append([]string{nodeKey(cs.Node), "UpdateChannel/" + c.Namespace + "/" + c.Name}, objs...)})
			}
		}
	}
	return out, nil
}

// CordonControlPlaneAlone: slipway begins a cordon on a control-plane node
// (of those any channel names) only while no other control-plane node is
// unavailable, NotReady ones included.
func CordonControlPlaneAlone(s State, _ Limits) ([]Finding, error) {
	if len(s.Cordons) == 0 {
		return nil, nil
	}
	named := map[string]bool{}
	for _, c := range s.Channels {
		nodes, err := channelNodes(c, s, NodeObs.ControlPlane)
		if err != nil {
			return nil, err
		}
		for _, n := range nodes {
			named[n.Name] = true
		}
	}
	var out []Finding
	for _, cs := range s.Cordons {
		if !named[cs.Node] {
			continue
		}
		var down, objs []string
		for _, n := range sortedNodes(s) {
			if named[n.Name] && n.Name != cs.Node && n.Unavailable() {
				down = append(down, n.Name+" ("+n.why()+")")
				objs = append(objs, nodeKey(n.Name))
			}
		}
		if len(down) > 0 {
			out = append(out, Finding{Invariant: InvCordonControlPlane, Key: cs.Node + "@" + cs.At.UTC().Format(time.RFC3339Nano),
				Message: fmt.Sprintf("slipway cordoned control-plane node %s while another was unavailable: %s", cs.Node, strings.Join(down, "; ")),
				Objects: append([]string{nodeKey(cs.Node)}, objs...)})
		}
	}
	return out, nil
}

// InvCordonOnceQuiet names the end-of-run rule NoCordonOnceQuiet.
const InvCordonOnceQuiet = "no-cordon-once-quiet"

// NoCordonOnceQuiet: once the system is quiet (no channel holds a slot and
// no node is in the update operator's flight), no node keeps a slipway
// cordon. It is not among Invariants: a cordon and its slot do not end in
// one write, so it is checked only when a run has settled (CheckQuiet).
func NoCordonOnceQuiet(s State, _ Limits) ([]Finding, error) {
	for _, c := range s.Channels {
		if len(c.Slots) > 0 {
			return nil, nil
		}
	}
	for _, n := range sortedNodes(s) {
		if n.InFlight {
			return nil, nil
		}
	}
	var out []Finding
	for _, n := range sortedNodes(s) {
		if n.SlipwayCordoned() {
			out = append(out, Finding{Invariant: InvCordonOnceQuiet, Key: n.Name,
				Message: fmt.Sprintf("node %s still cordoned by %s once no slot is held and no node is in flight", n.Name, n.CordonedBy),
				Objects: []string{nodeKey(n.Name)}})
		}
	}
	return out, nil
}

// CanaryConfined: a pod of an ExtendedDaemonSet's replica set that is not
// its active one, nor was ever seen active (a template not yet validated),
// runs only on the nodes of the canary of that replica set (those the
// status names, or named while the canary ran: a failed canary's pods
// are deleted after the status drops it). Terminating pods (a rollback under way)
// and pods younger than CanaryGrace are not judged.
func CanaryConfined(s State, l Limits) ([]Finding, error) {
	l = l.withDefaults()
	var out []Finding
	for _, p := range s.Pods {
		if p.Terminating || p.Node == "" || p.ReplicaSet == "" || s.Now.Sub(p.FirstSeen) < l.CanaryGrace {
			continue
		}
		e, ok := s.EDS[p.Namespace+"/"+p.EDS]
		if !ok || e.Active == "" || p.ReplicaSet == e.Active || e.Validated[p.ReplicaSet] {
			continue
		}
		if (e.CanaryReplicaSet == p.ReplicaSet && slices.Contains(e.CanaryNodes, p.Node)) || e.CanaryOn[p.ReplicaSet][p.Node] {
			continue
		}
		where := "no canary"
		if e.CanaryReplicaSet != "" {
			where = fmt.Sprintf("canary %s on %v", e.CanaryReplicaSet, e.CanaryNodes)
		}
		out = append(out, Finding{Invariant: InvCanaryConfined, Key: p.Namespace + "/" + p.Name,
			Message: fmt.Sprintf("pod %s/%s of replica set %s (active: %s; %s) runs on %s, outside the canary nodes", p.Namespace, p.Name,
				p.ReplicaSet, e.Active, where, p.Node),
			Objects: []string{"Pod/" + p.Namespace + "/" + p.Name, "ExtendedDaemonSet/" + p.Namespace + "/" + p.EDS}})
	}
	slices.SortFunc(out, func(a, b Finding) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}
