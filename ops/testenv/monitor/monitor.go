// Package monitor is the invariant monitor of the chaos runs: it watches
// the API server (Nodes with their boot IDs and slipway's cordons, Jobs,
// Pods, Leases, Events, UpdateChannels and ExtendedDaemonSets with their
// replica sets) through shared informers, keeps
// the recent versions of every object it sees, and checks the fleet-safety
// invariants (invariants.go, pure functions over the observed state) after
// every change it observes. Each violation is recorded once, with its time,
// the invariant's name and the recent history of the objects involved.
//
// A quiet monitor means something only because each invariant has a test
// that plants its violation by hand on a real kube-apiserver and sees it
// reported, beside a run within the rules that reports nothing.
package monitor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	edsv1alpha1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	opsv1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	versioned "slipway.dev/slipway/ops/generated/clientset/versioned"
	edsversioned "slipway.dev/slipway/ops/generated/eds/clientset/versioned"
	edsinformers "slipway.dev/slipway/ops/generated/eds/informers/externalversions"
	opsinformers "slipway.dev/slipway/ops/generated/informers/externalversions"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/ops/swarm/appcheck"
	"slipway.dev/slipway/ops/updateoperator"
)

// Config says what the monitor checks beyond what the API server shows.
type Config struct {
	Limits Limits
	// OperatorPrefix is the update operator's annotation prefix ("" :
	// update.slipway.dev).
	OperatorPrefix string
	// History is how many versions of each object are kept (default 16).
	History int
	// Apps, when set, is read at every Tick for the swarm applications'
	// reports (e.g. appcheck.ReadReports over the stand-ins' files).
	Apps func() appcheck.Sample
	// Tick is how often the time-driven checks run (writes per window, the
	// applications' reports) without an API change (default 200ms). It
	// reads only the monitor's own state, never the API server.
	Tick time.Duration
	// AuditLog, when set, is the API server's audit log (JSON lines of
	// its write requests): read at every Tick for bounded-write-requests.
	AuditLog string
	// Hosts, when set, is the simulated nodes' root (<Hosts>/<node>, a
	// testenv.Env's NodesRoot): the k3os hosts' files are checked too
	// (hosts.go: mixed-boot, staged-without-slot) every HostsEvery
	// (default 1s), staged-without-slot after HostsGrace (default
	// hostcheck.DefaultGrace).
	Hosts      string
	HostsEvery time.Duration
	HostsGrace time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Version is one observed version of an object.
type Version struct {
	At              time.Time
	ResourceVersion string
	// Summary is what the invariants read of it (for a Node: cordon,
	// readiness, boot ID, in flight), or "deleted".
	Summary string
}

// Violation is an invariant found broken.
type Violation struct {
	At        time.Time
	Invariant string
	Key       string
	Message   string
	// History holds the recent versions of each object involved, oldest
	// first.
	History map[string][]Version
}

func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %s", v.At.UTC().Format(time.RFC3339Nano), v.Invariant, v.Message)
	for _, k := range slices.Sorted(maps.Keys(v.History)) {
		fmt.Fprintf(&b, "\n  %s:", k)
		for _, h := range v.History[k] {
			fmt.Fprintf(&b, "\n    %s rv=%s %s", h.At.UTC().Format("15:04:05.000"), h.ResourceVersion, h.Summary)
		}
	}
	return b.String()
}

// Monitor watches one API server and checks the invariants.
type Monitor struct {
	cfg   Config
	keys  updateoperator.Keys
	hosts *hostChecks // nil: no Config.Hosts

	mu    sync.Mutex
	nodes map[string]NodeObs
	boots map[string]bootRecord // per node name, deleted nodes' too
	// slotSeen is, per node, when a channel's status.updating last listed
	// it: in a version, or in the one before a version without it.
	slotSeen map[string]time.Time
	nodeList []NodeObs // nodes sorted by name; nil after a node changed
	channels map[string]ChannelObs
	reboots  []Reboot
	cordons  []CordonStart
	pods     map[string]PodObs // EDS pods, by namespace/name
	eds      map[string]EDSObs
	covered  map[string]map[string]bool // nodes covered by an ExtendedDaemonSet not seen yet
	jobs     []string                   // ExpectJobs
	audit    *auditTail
	// the update operator's release events (uo.go)
	releaseFailures []ReleaseFailure
	releaseStarts   []ReleaseStart
	releaseFinishes []ReleaseFinish
	// analysis-gate (analysisgate.go)
	slotGrants []SlotGrant
	gateStarts []ReleaseStart
	fleet      []FleetObs
	requests   map[string][]time.Time
	jobsDue    time.Time
	writes     map[string][]time.Time
	history    map[string][]Version
	open       map[string]bool // invariant+key of the findings still standing
	violations []Violation
	checks     int
	errs       []error
	agents     agentWatch // no-agent-while-renewing (agentbeat.go)
	// every-failure-counted (failures.go)
	channelSlots  map[string][]opsv1.Slot // each channel's status.updating, last version seen
	slotEnds      []SlotEnd               // not judged to the end yet
	failureGrants []FailureGrant          // since the last check
	slotReports   map[string]map[types.UID]SlotReportObs
	nodeUpdates   map[string]bool   // nodes whose NodeUpdate carries their reports
	nuVersions    map[string]string // nodes' rootfs versions from their NodeUpdate (protocol 3)
	slotReleases  []SlotReleasedEvent
	channelFailed map[string][]opsv1.Failure // each channel's status.failed, last version seen
	failureDrops  []FailureDrop              // not judged to the end yet
	deleted       map[string]time.Time       // when each node was last seen deleted
}

// bootRecord is a node's last known boot ID, whether slipway held its
// cordon and a channel its slot in the last version seen with it, and
// when that version was seen.
type bootRecord struct {
	ID       string
	Cordoned bool
	Slot     bool
	At       time.Time
}

// inSlot reports whether some channel's status.updating lists node, as
// the monitor last saw the channels. Call with m.mu held.
func (m *Monitor) inSlot(node string) bool {
	for _, c := range m.channels {
		if slices.Contains(c.Slots, node) {
			return true
		}
	}
	return false
}

// channelsOf are the channels ("namespace/name", sorted) whose
// nodeSelector selects a node labelled lbls. Call with m.mu held.
func (m *Monitor) channelsOf(lbls map[string]string) []string {
	var out []string
	for k, c := range m.channels {
		if c.selects(lbls) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// New makes a monitor; Run starts it.
func New(cfg Config) (*Monitor, error) {
	keys, err := updateoperator.NewKeys(cfg.OperatorPrefix)
	if err != nil {
		return nil, fmt.Errorf("monitor: %w", err)
	}
	if cfg.History <= 0 {
		cfg.History = 16
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 200 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Limits = cfg.Limits.withDefaults()
	return &Monitor{cfg: cfg, keys: keys, nodes: map[string]NodeObs{}, boots: map[string]bootRecord{}, slotSeen: map[string]time.Time{}, channels: map[string]ChannelObs{},
		writes: map[string][]time.Time{}, history: map[string][]Version{}, open: map[string]bool{},
		pods: map[string]PodObs{}, eds: map[string]EDSObs{}, covered: map[string]map[string]bool{},
		audit: &auditTail{path: cfg.AuditLog}, requests: map[string][]time.Time{}, hosts: newHostChecks(cfg),
		channelSlots: map[string][]opsv1.Slot{}, slotReports: map[string]map[types.UID]SlotReportObs{}, nodeUpdates: map[string]bool{}, nuVersions: map[string]string{},
		channelFailed: map[string][]opsv1.Failure{}, deleted: map[string]time.Time{}}, nil
}

// Run watches the API server of config until ctx ends. It returns once the
// informers have synced (the initial state checked), the watching going on
// in the background.
func (m *Monitor) Run(ctx context.Context, config *rest.Config) error {
	kc, err := kubernetes.NewForConfig(config)
	if err != nil {
		return fmt.Errorf("monitor: client: %w", err)
	}
	oc, err := versioned.NewForConfig(config)
	if err != nil {
		return fmt.Errorf("monitor: ops client: %w", err)
	}
	ec, err := edsversioned.NewForConfig(config)
	if err != nil {
		return fmt.Errorf("monitor: eds client: %w", err)
	}
	// One factory per clientset, no resync: every event is a real change.
	kf := informers.NewSharedInformerFactory(kc, 0)
	// The update operator's fleet state: its ConfigMap alone, by name.
	fleetName := updateoperator.FleetStateName(m.keys.Prefix)
	cf := informers.NewSharedInformerFactoryWithOptions(kc, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "metadata.name=" + fleetName
	}))
	of := opsinformers.NewSharedInformerFactory(oc, 0)
	ef := edsinformers.NewSharedInformerFactory(ec, 0)
	for _, inf := range []cache.SharedIndexInformer{
		kf.Core().V1().Nodes().Informer(), kf.Core().V1().Pods().Informer(), kf.Batch().V1().Jobs().Informer(),
		kf.Coordination().V1().Leases().Informer(), kf.Core().V1().Events().Informer(),
		cf.Core().V1().ConfigMaps().Informer(),
		of.Ops().V1().UpdateChannels().Informer(), of.Ops().V1().NodeUpdates().Informer(),
		ef.Eds().V1alpha1().ExtendedDaemonSets().Informer(), ef.Eds().V1alpha1().ExtendedDaemonSetReplicaSets().Informer(),
	} {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
			AddFunc: func(o any, initial bool) {
				if initial {
					m.listed(o) // agentbeat.go: there before the monitor looked
				}
				m.observe(nil, o, false)
			},
			UpdateFunc: func(old, o any) { m.observe(old, o, false) },
			DeleteFunc: func(o any) {
				if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
					o = t.Obj
				}
				m.observe(nil, o, true)
			},
		}); err != nil {
			return fmt.Errorf("monitor: handler: %w", err)
		}
	}
	kf.Start(ctx.Done())
	cf.Start(ctx.Done())
	of.Start(ctx.Done())
	ef.Start(ctx.Done())
	for typ, ok := range kf.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("monitor: %v never synced", typ)
		}
	}
	for typ, ok := range cf.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("monitor: %v never synced", typ)
		}
	}
	for typ, ok := range of.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("monitor: %v never synced", typ)
		}
	}
	for typ, ok := range ef.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("monitor: %v never synced", typ)
		}
	}
	go func() {
		t := time.NewTicker(m.cfg.Tick)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				m.Tick()
			}
		}
	}()
	return nil
}

// Tick runs the checks with the applications' latest reports, without an
// API change (the writes window moves on with time).
func (m *Monitor) Tick() {
	var apps appcheck.Sample
	if m.cfg.Apps != nil {
		apps = m.cfg.Apps()
	}
	m.checkHosts(false)
	var reqs []auditRequest
	var auditErr error
	if m.cfg.AuditLog != "" {
		reqs, auditErr = m.audit.read()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if auditErr != nil {
		m.errs = append(m.errs, fmt.Errorf("%s: %w", InvWriteRequests, auditErr))
	}
	for _, r := range reqs {
		ts := append(m.requests[r.Key], r.At)
		slices.SortFunc(ts, time.Time.Compare)
		m.requests[r.Key] = ts
	}
	m.checkLocked(apps)
}

// CheckQuiet checks, once, the rules of a settled system
// (NoCordonOnceQuiet) and records what they find; a run calls it when it
// has settled.
func (m *Monitor) CheckQuiet() {
	m.checkHosts(true)
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.Now()
	// The audit log arrives in batches (up to a second late): requests
	// are kept over a few windows.
	for k, ts := range m.requests {
		i := 0
		for i < len(ts) && now.Sub(ts[i]) > 5*m.cfg.Limits.Window {
			i++
		}
		if i == len(ts) {
			delete(m.requests, k)
		} else {
			m.requests[k] = ts[i:]
		}
	}
	if m.nodeList == nil {
		m.nodeList = sortedNodes(State{Nodes: m.nodes})
	}
	s := State{Now: now, Requests: m.requests, Nodes: m.nodes, NodeList: m.nodeList}
	for _, name := range slices.Sorted(maps.Keys(m.channels)) {
		s.Channels = append(s.Channels, m.channels[name])
	}
	m.checks++
	fs, _ := NoCordonOnceQuiet(s, m.cfg.Limits)
	for _, f := range fs {
		v := Violation{At: now, Invariant: f.Invariant, Key: f.Key, Message: f.Message, History: map[string][]Version{}}
		for _, o := range f.Objects {
			v.History[o] = slices.Clone(m.history[o])
		}
		m.violations = append(m.violations, v)
	}
}

// Violations are those recorded so far, oldest first.
func (m *Monitor) Violations() []Violation {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.violations)
}

// Checks is how many times the invariants were checked.
func (m *Monitor) Checks() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.checks
}

// History is the versions of one object (kind/namespace/name) the monitor
// keeps, oldest first.
func (m *Monitor) History(key string) []Version {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.history[key])
}

// Errors are the checks that could not be made.
func (m *Monitor) Errors() []error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.errs)
}

func objKey(kind string, o metav1.Object) string {
	return kind + "/" + o.GetNamespace() + "/" + o.GetName()
}

// observe records one version of an object and checks the invariants.
func (m *Monitor) observe(old, o any, deleted bool) {
	now := m.cfg.Now()
	obj, err := meta.Accessor(o)
	if err != nil {
		return
	}
	kind, summary := "", ""
	m.mu.Lock()
	defer m.mu.Unlock()
	m.observeAgents(old, o, deleted, now) // agentbeat.go
	switch x := o.(type) {
	case *corev1.Node:
		kind = "Node"
		m.nodeList = nil
		if deleted {
			delete(m.nodes, x.Name) // its boot record stays: registered again with a new boot ID, it rebooted
			m.deleted[x.Name] = now
			for _, e := range m.eds {
				delete(e.Covered, x.Name)
			}
			break
		}
		n := m.nodeObs(x)
		if v, ok := m.nuVersions[x.Name]; ok {
			n.Version = v
		}
		if !m.nodeUpdates[x.Name] {
			if rs, err := protocol.ParseReports(x.Annotations[protocol.AnnotationSlotReport]); err == nil {
				m.noteReports(x.Name, rs, x.ResourceVersion)
			}
		}
		if prev, ok := m.nodes[x.Name]; ok && prev.Ready && n.Ready {
			n.ReadySince = prev.ReadySince
		} else if ok && n.Ready {
			n.ReadySince = now
		}
		if prev, ok := m.nodes[x.Name]; ok && !prev.Ready && !n.Ready && !prev.NotReadySince.IsZero() {
			n.NotReadySince = prev.NotReadySince
		} else if !n.Ready {
			n.NotReadySince = now
		}
		if prev, ok := m.nodes[x.Name]; ok && prev.Operator.Wanted == n.Operator.Wanted {
			n.WantedSince = prev.WantedSince
		} else {
			n.WantedSince = now
		}
		if n.BootID != "" { // a version of no known boot (just registered) says nothing of one
			rec := m.boots[x.Name]
			slot := m.inSlot(x.Name)
			if rec.ID != "" && rec.ID != n.BootID {
				seen, ok := m.slotSeen[x.Name]
				m.reboots = append(m.reboots, Reboot{Node: x.Name, From: rec.ID, To: n.BootID, At: now,
					Cordoned: rec.Cordoned || n.SlipwayCordoned(),
					Slot:     rec.Slot || slot || (ok && !seen.Before(rec.At)),
					Channels: m.channelsOf(n.Labels)})
			}
			m.boots[x.Name] = bootRecord{ID: n.BootID, Cordoned: n.SlipwayCordoned(), Slot: slot, At: now}
		}
		prevOp, seen := m.nodes[x.Name]
		fail, start, fin := observeOperator(x.Name, prevOp.Operator, seen, n.Operator, now)
		if fail != nil {
			m.releaseFailures = append(m.releaseFailures, *fail)
		}
		if start != nil {
			m.releaseStarts = append(m.releaseStarts, *start)
			m.gateStarts = append(m.gateStarts, *start)
		}
		if fin != nil {
			m.releaseFinishes = append(m.releaseFinishes, *fin)
		}
		if prev, ok := m.nodes[x.Name]; n.SlipwayCordoned() && (!ok || !prev.SlipwayCordoned()) {
			m.cordons = append(m.cordons, CordonStart{Node: x.Name, At: now})
		}
		m.nodes[x.Name] = n
		summary = fmt.Sprintf("unschedulable=%t cordoned-by=%q ready=%t boot=%s in-flight=%t", n.Unschedulable, n.CordonedBy, n.Ready, n.BootID, n.InFlight)
		if op := n.Operator; op != (OperatorView{}) {
			summary += fmt.Sprintf(" wanted=%s active=%s state=%s current=%s target=%s", op.Wanted, op.Active, op.State, op.Current, op.Target)
		}
	case *opsv1.UpdateChannel:
		kind = "UpdateChannel"
		if deleted {
			delete(m.channels, x.Namespace+"/"+x.Name)
			delete(m.channelSlots, x.Namespace+"/"+x.Name)
			delete(m.channelFailed, x.Namespace+"/"+x.Name)
			break
		}
		c := ChannelObs{Namespace: x.Namespace, Name: x.Name, Concurrency: x.Spec.Concurrency, Selector: x.Spec.NodeSelector}
		for _, s := range x.Status.Updating {
			c.Slots = append(c.Slots, s.Node)
		}
		prev, seen := m.channels[x.Namespace+"/"+x.Name]
		for _, s := range append(slices.Clone(prev.Slots), c.Slots...) { // held until this version at least
			m.slotSeen[s] = now
		}
		m.slotGrants = append(m.slotGrants, observeChannelGrants(prev.Slots, seen, x, now)...)
		if seen {
			m.slotEnds = append(m.slotEnds, slotEnds(m.channelSlots[x.Namespace+"/"+x.Name], x, now)...)
			m.failureGrants = append(m.failureGrants, failureGrants(m.channelSlots[x.Namespace+"/"+x.Name], x, now)...)
			m.failureDrops = append(m.failureDrops, failureDrops(m.channelFailed[x.Namespace+"/"+x.Name], x, now)...)
		}
		m.channelSlots[x.Namespace+"/"+x.Name] = slices.Clone(x.Status.Updating)
		m.channelFailed[x.Namespace+"/"+x.Name] = slices.Clone(x.Status.Failed)
		m.channels[x.Namespace+"/"+x.Name] = c
		summary = fmt.Sprintf("concurrency=%d slots=%v", c.Concurrency, c.Slots)
	case *opsv1.NodeUpdate:
		kind = "NodeUpdate"
		if deleted {
			break
		}
		summary = fmt.Sprintf("protocol=%d", x.Status.Protocol)
		if x.Status.Protocol >= protocol.NodeUpdateProtocol {
			m.nodeUpdates[x.Name] = true
			rs := protocol.ReportsOfStatus(x.Status)
			m.noteReports(x.Name, rs, x.ResourceVersion)
			summary += " reports=" + rs.String()
		}
		if protocol.VersionsInStatus(x) && x.Status.Booted != nil {
			m.nuVersions[x.Name] = x.Status.Booted.Rootfs
			if n, ok := m.nodes[x.Name]; ok {
				n.Version = x.Status.Booted.Rootfs
				m.nodes[x.Name] = n
			}
			summary += " booted=" + x.Status.Booted.Rootfs
		}
	case *corev1.ConfigMap: // the update operator's fleet state only (the informer's field selector)
		kind = "ConfigMap"
		if !deleted {
			f := FleetObs{Key: objKey(kind, x), At: now, Hold: fleetHold(x)}
			m.fleet = append(m.fleet, f)
			if len(m.fleet) > 64 {
				m.fleet = m.fleet[len(m.fleet)-64:]
			}
			summary = "hold=" + strconv.Quote(f.Hold)
		}
	case *corev1.Pod:
		kind, summary = "Pod", fmt.Sprintf("node=%s phase=%s", x.Spec.NodeName, x.Status.Phase)
		pk := x.Namespace + "/" + x.Name
		if ers := x.Labels[edsv1alpha1.LabelReplicaSet]; ers != "" && !deleted {
			first := now
			if prev, ok := m.pods[pk]; ok {
				first = prev.FirstSeen
			}
			p := PodObs{Namespace: x.Namespace, Name: x.Name, Node: x.Spec.NodeName, EDS: x.Labels[edsv1alpha1.LabelName], ReplicaSet: ers,
				Terminating: x.DeletionTimestamp != nil, FirstSeen: first, Ready: podReady(x)}
			m.pods[pk] = p
			if p.Ready && !p.Terminating && p.Node != "" {
				if _, ok := m.nodes[p.Node]; ok {
					m.cover(x.Namespace+"/"+p.EDS, p.Node)
				}
			}
			summary += fmt.Sprintf(" replicaset=%s ready=%t terminating=%t", ers, p.Ready, p.Terminating)
		} else {
			delete(m.pods, pk)
		}
	case *edsv1alpha1.ExtendedDaemonSet:
		kind, summary = "ExtendedDaemonSet", fmt.Sprintf("generation=%d active=%s", x.Generation, x.Status.ActiveReplicaSet)
		ek := x.Namespace + "/" + x.Name
		if deleted {
			delete(m.eds, ek)
			delete(m.covered, ek)
			break
		}
		e := EDSObs{Namespace: x.Namespace, Name: x.Name, Active: x.Status.ActiveReplicaSet,
			MaxUnavailable: x.Spec.Strategy.RollingUpdate.MaxUnavailable, Covered: m.eds[ek].Covered}
		if e.Covered == nil {
			e.Covered = m.covered[ek]
			delete(m.covered, ek)
		}
		if e.Covered == nil {
			e.Covered = map[string]bool{}
		}
		e.Validated = m.eds[ek].Validated
		if e.Validated == nil {
			e.Validated = map[string]bool{}
		}
		if e.Active != "" {
			e.Validated[e.Active] = true
		}
		e.CanaryOn = m.eds[ek].CanaryOn
		if e.CanaryOn == nil {
			e.CanaryOn = map[string]map[string]bool{}
		}
		if c := x.Status.Canary; c != nil && c.ReplicaSet != "" {
			if e.CanaryOn[c.ReplicaSet] == nil {
				e.CanaryOn[c.ReplicaSet] = map[string]bool{}
			}
			for _, n := range c.Nodes {
				e.CanaryOn[c.ReplicaSet][n] = true
			}
		}
		if c := x.Status.Canary; c != nil {
			e.CanaryReplicaSet, e.CanaryNodes = c.ReplicaSet, slices.Clone(c.Nodes)
			summary += fmt.Sprintf(" canary=%s on %v", c.ReplicaSet, c.Nodes)
		}
		m.eds[ek] = e
	case *edsv1alpha1.ExtendedDaemonSetReplicaSet:
		kind, summary = "ExtendedDaemonSetReplicaSet", fmt.Sprintf("generation=%d", x.Generation)
	case *batchv1.Job:
		kind, summary = "Job", fmt.Sprintf("active=%d succeeded=%d failed=%d", x.Status.Active, x.Status.Succeeded, x.Status.Failed)
	case *coordinationv1.Lease:
		kind = "Lease"
		if x.Spec.HolderIdentity != nil {
			summary = "holder=" + *x.Spec.HolderIdentity
		}
	case *corev1.Event:
		if x.Reason == "SlotReleased" && x.InvolvedObject.Kind == "UpdateChannel" && !deleted {
			if pe, ok := old.(*corev1.Event); old == nil || ok && pe.Count != x.Count {
				m.slotReleases = append(m.slotReleases, SlotReleasedEvent{Channel: x.InvolvedObject.Namespace + "/" + x.InvolvedObject.Name, Message: x.Message, At: now})
			}
		}
		kind, summary = "Event", fmt.Sprintf("%s %s/%s: %s x%d", x.Reason, x.InvolvedObject.Kind, x.InvolvedObject.Name, x.Message, x.Count)
	default:
		return
	}
	if deleted {
		summary = "deleted"
	}
	key := objKey(kind, obj)
	h := append(m.history[key], Version{At: now, ResourceVersion: obj.GetResourceVersion(), Summary: summary})
	if len(h) > m.cfg.History {
		h = h[len(h)-m.cfg.History:]
	}
	m.history[key] = h
	if old != nil && !deleted {
		m.writes[key] = append(m.writes[key], now)
	}
	m.checkLocked(nil)
}

// cover records that ExtendedDaemonSet ek (namespace/name) ran a Ready
// pod on node.
func (m *Monitor) cover(ek, node string) {
	if e, ok := m.eds[ek]; ok {
		e.Covered[node] = true
		return
	}
	if m.covered[ek] == nil {
		m.covered[ek] = map[string]bool{}
	}
	m.covered[ek][node] = true
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (m *Monitor) nodeObs(n *corev1.Node) NodeObs {
	o := NodeObs{Name: n.Name, Labels: n.Labels, Unschedulable: n.Spec.Unschedulable,
		CordonedBy: drain.CordonedBy(n.Annotations), BootID: n.Status.NodeInfo.BootID, Version: n.Annotations[protocol.AnnotationRootfsVersion]}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			o.Ready = c.Status == corev1.ConditionTrue
		}
	}
	v := m.keys.View(n, "")
	o.InFlight = updateoperator.InFlight(v)
	o.Operator = OperatorView{Wanted: v.Wanted, Active: v.Active, State: v.State, Current: v.Current, Target: v.Target}
	return o
}

// checkLocked runs every invariant over the state and records the new
// findings. apps nil: the applications' reports are not read this time.
func (m *Monitor) checkLocked(apps appcheck.Sample) {
	now := m.cfg.Now()
	// Forget writes older than the window.
	for k, ts := range m.writes {
		i := 0
		for i < len(ts) && now.Sub(ts[i]) > m.cfg.Limits.Window {
			i++
		}
		if i == len(ts) {
			delete(m.writes, k)
		} else {
			m.writes[k] = ts[i:]
		}
	}
	// The audit log arrives in batches (up to a second late): requests
	// are kept over a few windows.
	for k, ts := range m.requests {
		i := 0
		for i < len(ts) && now.Sub(ts[i]) > 5*m.cfg.Limits.Window {
			i++
		}
		if i == len(ts) {
			delete(m.requests, k)
		} else {
			m.requests[k] = ts[i:]
		}
	}
	if m.nodeList == nil {
		m.nodeList = sortedNodes(State{Nodes: m.nodes})
	}
	s := State{Now: now, Requests: m.requests, Nodes: m.nodes, NodeList: m.nodeList, Reboots: m.reboots, Cordons: m.cordons, Writes: m.writes, Apps: apps, EDS: m.eds, Jobs: m.jobs, JobsDue: m.jobsDue,
		ReleaseFailures: m.releaseFailures, ReleaseStarts: m.releaseStarts, ReleaseFinishes: m.releaseFinishes,
		SlotGrants: m.slotGrants, GateStarts: m.gateStarts, Fleet: m.fleet}
	s.AgentBeats, s.AgentBlames = m.agents.beats, m.agents.blames
	s.SlotEnds, s.FailureGrants, s.SlotReports, s.SlotReleases = m.slotEnds, m.failureGrants, m.slotReports, m.slotReleases
	s.FailureDrops, s.Deleted = m.failureDrops, m.deleted
	for _, k := range slices.Sorted(maps.Keys(m.pods)) {
		s.Pods = append(s.Pods, m.pods[k])
	}
	for _, name := range slices.Sorted(maps.Keys(m.channels)) {
		s.Channels = append(s.Channels, m.channels[name])
	}
	m.checks++
	standing := map[string]bool{}
	for _, inv := range Invariants {
		if (inv.Name == InvDoubleHeld || inv.Name == InvJobsRunning) && apps == nil {
			for k := range m.open { // not read this time: what stood, stands
				if strings.HasPrefix(k, inv.Name+"\x00") {
					standing[k] = true
				}
			}
			continue
		}
		fs, err := inv.Check(s, m.cfg.Limits)
		if err != nil {
			m.errs = append(m.errs, fmt.Errorf("%s: %w", inv.Name, err))
			continue
		}
		for _, f := range fs {
			id := f.Invariant + "\x00" + f.Key
			standing[id] = true
			if m.open[id] {
				continue
			}
			v := Violation{At: now, Invariant: f.Invariant, Key: f.Key, Message: f.Message, History: map[string][]Version{}}
			for _, o := range f.Objects {
				v.History[o] = slices.Clone(m.history[o])
			}
			m.violations = append(m.violations, v)
		}
	}
	// A reboot is judged once; findings keyed by it stay recorded.
	m.reboots, m.cordons, m.releaseStarts, m.releaseFinishes = nil, nil, nil, nil
	m.slotGrants = nil
	m.agents.blames = nil
	m.failureGrants = nil
	m.slotEnds = slices.DeleteFunc(m.slotEnds, func(e SlotEnd) bool { return e.Counted || now.Sub(e.At) >= m.cfg.Limits.CountGrace }) // judged
	m.failureDrops = slices.DeleteFunc(m.failureDrops, func(d FailureDrop) bool { return now.Sub(d.At) >= m.cfg.Limits.CountGrace })  // judged
	m.slotReleases = slices.DeleteFunc(m.slotReleases, func(e SlotReleasedEvent) bool { return now.Sub(e.At) > 2*m.cfg.Limits.CountGrace })
	m.gateStarts = slices.DeleteFunc(m.gateStarts, func(st ReleaseStart) bool { return now.Sub(st.At) >= m.cfg.Limits.GateGrace }) // judged
	for k := range m.open {
		if strings.HasPrefix(k, InvRebootWithoutDrain+"\x00") || strings.HasPrefix(k, InvRebootWithoutSlot+"\x00") || strings.HasPrefix(k, InvCordonBudget+"\x00") || strings.HasPrefix(k, InvCordonControlPlane+"\x00") ||
			strings.HasPrefix(k, InvOperatorBrake+"\x00") || strings.HasPrefix(k, InvFallbackFailure+"\x00") || strings.HasPrefix(k, InvAnalysisGate+"\x00") ||
			strings.HasPrefix(k, InvFailureCounted+"\x00") {
			standing[k] = true
		}
	}
	m.open = standing
}

// WriteJSON writes v as one JSON line: time, invariant, key, message and
// the recent history of each object involved.
func WriteJSON(w io.Writer, v Violation) error {
	type version struct {
		At              time.Time `json:"at"`
		ResourceVersion string    `json:"resourceVersion,omitempty"`
		Summary         string    `json:"summary"`
	}
	line := struct {
		At        time.Time            `json:"at"`
		Invariant string               `json:"invariant"`
		Key       string               `json:"key"`
		Message   string               `json:"message"`
		History   map[string][]version `json:"history,omitempty"`
	}{At: v.At.UTC(), Invariant: v.Invariant, Key: v.Key, Message: v.Message, History: map[string][]version{}}
	for k, hs := range v.History {
		for _, h := range hs {
			line.History[k] = append(line.History[k], version{At: h.At.UTC(), ResourceVersion: h.ResourceVersion, Summary: h.Summary})
		}
	}
	b, err := json.Marshal(line)
	if err != nil {
		return fmt.Errorf("violation to JSON: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// noteReports records node's slot reports (by channel UID) that changed,
// with the resourceVersion of the object they came with. Call with m.mu
// held.
func (m *Monitor) noteReports(node string, rs protocol.Reports, rv string) {
	if m.slotReports[node] == nil {
		m.slotReports[node] = map[types.UID]SlotReportObs{}
	}
	for uid, r := range rs {
		if prev, ok := m.slotReports[node][uid]; ok && sameReport(prev.Report, r) {
			continue
		}
		m.slotReports[node][uid] = SlotReportObs{Report: r, RV: rv}
	}
}

// sameReport: the same slot, phase and outcome.
func sameReport(a, b protocol.Report) bool {
	return a.Version == b.Version && a.Attempt == b.Attempt && a.Since.Unix() == b.Since.Unix() &&
		a.Phase == b.Phase && a.Outcome == b.Outcome && a.Reason == b.Reason
}

// ReadJSON reads violations written by WriteJSON, one a line (blank lines
// skipped), e.g. the file of a `slipway-sim monitor` process: what a run
// judges with what the process does not know (its faults' excuses).
func ReadJSON(r io.Reader) ([]Violation, error) {
	type version struct {
		At              time.Time `json:"at"`
		ResourceVersion string    `json:"resourceVersion"`
		Summary         string    `json:"summary"`
	}
	var out []Violation
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var line struct {
			At        time.Time            `json:"at"`
			Invariant string               `json:"invariant"`
			Key       string               `json:"key"`
			Message   string               `json:"message"`
			History   map[string][]version `json:"history"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return out, fmt.Errorf("violation line %d: %w", n, err)
		}
		v := Violation{At: line.At, Invariant: line.Invariant, Key: line.Key, Message: line.Message}
		if len(line.History) > 0 {
			v.History = map[string][]Version{}
			for k, hs := range line.History {
				for _, h := range hs {
					v.History[k] = append(v.History[k], Version(h))
				}
			}
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("read violations: %w", err)
	}
	return out, nil
}
