package monitor

import (
	"fmt"
	"regexp"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	opsv1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/protocol"
)

// InvNoAgentWhileRenewing is the rule that the k3os controller blames an
// agent for silence only when it was silent: no node is newly skipped as
// NoAgent, and no slot released because its agent stopped reporting,
// while the monitor saw that agent's heartbeat Lease renewed steadily.
// It judges by when the monitor saw the renewTime change, on its own
// clock, never by the renewTime itself (written by the agent's clock).
const InvNoAgentWhileRenewing = "no-agent-while-renewing"

// skipNoAgent is the reason an UpdateChannel's status.skipped gives a node
// whose agent it judges silent (plan.SkipNoAgent).
const skipNoAgent = "NoAgent"

// maxBeats is how many observations of one heartbeat Lease are kept: a TTL
// is three renewals, so this covers several TTLs.
const maxBeats = 32

// AgentBeats is what the monitor saw of one node's agent heartbeat Lease
// (protocol.AgentLeaseName, held by its node), on the monitor's own clock.
type AgentBeats struct {
	// Lease is the Lease's history key.
	Lease string
	// TTL is the Lease's leaseDurationSeconds: how long the agent says a
	// heartbeat counts (three heartbeat intervals); 0: not judged.
	TTL time.Duration
	// renew is the renewTime (and holder) last seen.
	renew string
	// Seen are when the monitor saw the Lease created and each change of
	// its renewTime since, oldest first (the last maxBeats). A Lease
	// already there when the monitor started is not counted as renewed
	// then: its first change is.
	Seen []time.Time
}

// AgentBlame is the k3os controller saying a node's agent is silent: a
// channel's status newly listing the node skipped as NoAgent, or an Event
// saying a slot was released because its agent stopped reporting.
type AgentBlame struct {
	Node string
	At   time.Time
	// What is what said so (the channel and its message, or the Event).
	What string
	// Object is the history key of the channel or Event that said it.
	Object string
}

// agentWatch is the monitor's state for no-agent-while-renewing.
type agentWatch struct {
	beats  map[string]AgentBeats // by node
	skips  map[string]map[string]bool
	blames []AgentBlame // since the last check
	listed map[string]bool
}

// listed records that o came in an informer's initial list (it was there
// before the monitor looked): a heartbeat Lease listed is not a renewal,
// an Event listed is not a new blame. Called before observe, from the
// same handler.
func (m *Monitor) listed(o any) {
	switch x := o.(type) {
	case *coordinationv1.Lease:
		m.listedKey(objKey("Lease", x))
	case *corev1.Event:
		m.listedKey(objKey("Event", x))
	}
}

func (m *Monitor) listedKey(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.agents.listed == nil {
		m.agents.listed = map[string]bool{}
	}
	m.agents.listed[key] = true
}

// observeAgents records what no-agent-while-renewing reads of o: a
// heartbeat Lease's renewals, a channel's new NoAgent skips, an Event of a
// slot released for a silent agent. Called with m.mu held.
func (m *Monitor) observeAgents(old, o any, deleted bool, now time.Time) {
	a := &m.agents
	if a.beats == nil {
		a.beats, a.skips = map[string]AgentBeats{}, map[string]map[string]bool{}
	}
	switch x := o.(type) {
	case *coordinationv1.Lease:
		key := objKey("Lease", x)
		listed := a.listed[key]
		delete(a.listed, key)
		node := heartbeatNode(x)
		if node == "" {
			return
		}
		if deleted {
			delete(a.beats, node)
			return
		}
		a.beats[node] = observeBeat(a.beats[node], key, x, listed, now)
	case *opsv1.UpdateChannel:
		key := x.Namespace + "/" + x.Name
		if deleted {
			delete(a.skips, key)
			return
		}
		prev, seen := a.skips[key]
		cur := map[string]bool{}
		for _, s := range x.Status.Skipped {
			if s.Reason != skipNoAgent {
				continue
			}
			cur[s.Node] = true
			if seen && !prev[s.Node] { // its first version seen: skips made before the monitor looked
				a.blames = append(a.blames, AgentBlame{Node: s.Node, At: now, Object: objKey("UpdateChannel", x),
					What: fmt.Sprintf("channel %s skipped it as %s (%q)", key, skipNoAgent, s.Message)})
			}
		}
		a.skips[key] = cur
	case *corev1.Event:
		key := objKey("Event", x)
		listed := a.listed[key]
		delete(a.listed, key)
		if deleted || listed {
			return
		}
		var prev *corev1.Event
		if e, ok := old.(*corev1.Event); ok {
			prev = e
		}
		if b, ok := releasedForSilence(prev, x, now); ok {
			b.Object = key
			a.blames = append(a.blames, b)
		}
	}
}

// heartbeatNode is the node whose agent heartbeat l is ("": not one): a
// Lease named protocol.AgentLeaseName of its holder.
func heartbeatNode(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || l.Name != protocol.AgentLeaseName(*l.Spec.HolderIdentity) {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// observeBeat is b after the monitor saw heartbeat Lease l (history key
// key) at now: a renewal when its renewTime or holder changed, or when it
// is new to the monitor and was not in the initial list (created).
func observeBeat(b AgentBeats, key string, l *coordinationv1.Lease, listed bool, now time.Time) AgentBeats {
	b.Lease = key
	if s := l.Spec.LeaseDurationSeconds; s != nil && *s > 0 {
		b.TTL = time.Duration(*s) * time.Second
	}
	renew := ""
	if l.Spec.RenewTime != nil {
		renew = l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
	}
	renew += " " + *l.Spec.HolderIdentity
	first := b.renew == ""
	if renew == b.renew {
		return b
	}
	b.renew = renew
	if first && listed {
		return b // there before the monitor looked: when it was renewed is unknown
	}
	b.Seen = append(b.Seen, now)
	if len(b.Seen) > maxBeats {
		b.Seen = slices.Clone(b.Seen[len(b.Seen)-maxBeats:])
	}
	return b
}

// silenceMessage matches the k3os controller's messages of a slot released
// because its node's agent is silent (plan.Abandoned): "the slipway agent
// of node N stopped reporting …" and "node N has no slipway agent
// reporting …".
var silenceMessage = regexp.MustCompile(`agent of node (\S+) stopped reporting|node (\S+) has no slipway agent reporting`)

// releasedForSilence is the blame of Event e (prev: its version seen
// before, nil when new): a SlotReleased Event of an UpdateChannel naming a
// node whose agent stopped reporting, new or seen again (its count grew).
func releasedForSilence(prev, e *corev1.Event, now time.Time) (AgentBlame, bool) {
	if e.Reason != "SlotReleased" || e.InvolvedObject.Kind != "UpdateChannel" {
		return AgentBlame{}, false
	}
	if prev != nil && e.Count <= prev.Count {
		return AgentBlame{}, false
	}
	sm := silenceMessage.FindStringSubmatch(e.Message)
	if sm == nil {
		return AgentBlame{}, false
	}
	node := sm[1]
	if node == "" {
		node = sm[2]
	}
	return AgentBlame{Node: node, At: now, What: fmt.Sprintf("channel %s/%s released its slot (Event %s: %q)",
		e.InvolvedObject.Namespace, e.InvolvedObject.Name, e.Reason, e.Message)}, true
}

// steadyMargin is the longest silence of a heartbeat, as a share of its
// TTL, that still counts as renewing steadily: half the TTL (one and a
// half heartbeat intervals). A controller that judges by what it sees
// calls an agent silent only after a full TTL without a change.
const steadyMargin = 2

// renewingSteadily reports whether b shows its agent renewing throughout
// the TTL before at: renewed within TTL/2 before at, and over the TTL
// before at never a gap longer than TTL/2 between two renewals the
// monitor saw (a Lease first seen within that TTL counts from then, as
// a controller's first read of it does).
func renewingSteadily(b AgentBeats, at time.Time) (bool, time.Duration) {
	if b.TTL <= 0 {
		return false, 0
	}
	margin := b.TTL / steadyMargin
	i := len(b.Seen) - 1
	for i >= 0 && b.Seen[i].After(at) {
		i--
	}
	if i < 0 || at.Sub(b.Seen[i]) > margin {
		return false, 0
	}
	last := at.Sub(b.Seen[i])
	for ; i > 0 && b.Seen[i].After(at.Add(-b.TTL)); i-- {
		if b.Seen[i].Sub(b.Seen[i-1]) > margin {
			return false, 0
		}
	}
	return true, last
}

// NoAgentWhileRenewing: the k3os controller says a node's agent is silent
// (a new NoAgent skip, a slot released for it) only when the monitor did
// not see that agent's heartbeat Lease renewing steadily over the TTL
// before (renewingSteadily). A controller comparing the renewTime, written
// by the agent's clock, with its own clock breaks it when the two clocks
// differ by more than the TTL.
func NoAgentWhileRenewing(s State, _ Limits) ([]Finding, error) {
	var out []Finding
	for _, b := range s.AgentBlames {
		beats, ok := s.AgentBeats[b.Node]
		if !ok {
			continue
		}
		steady, last := renewingSteadily(beats, b.At)
		if !steady {
			continue
		}
		out = append(out, Finding{Invariant: InvNoAgentWhileRenewing, Key: b.Node + "@" + b.At.UTC().Format(time.RFC3339Nano),
			Message: fmt.Sprintf("node %s blamed on a silent agent: %s; yet the monitor saw its heartbeat Lease renewed %s before, and steadily over the TTL of %s before that",
				b.Node, b.What, last.Round(time.Millisecond), beats.TTL),
			Objects: []string{b.Object, beats.Lease, nodeKey(b.Node)}})
	}
	return out, nil
}
