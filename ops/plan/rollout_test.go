package plan

import (
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

func TestSkip(t *testing.T) {
	ttl := 3 * time.Minute
	fresh := Heartbeat{Reported: true, SilentFor: time.Minute}
	for _, tc := range []struct {
		name string
		h    Health
		want string // reason; "" = eligible
		msg  string // in the message
	}{
		{"ready with agent", Health{Ready: true, Agent: fresh}, "", ""},
		{"its heartbeat just read for the first time", Health{Ready: true, Agent: Heartbeat{Reported: true}}, "", ""},
		{"silent for exactly the TTL", Health{Ready: true, Agent: Heartbeat{Reported: true, SilentFor: ttl}}, "", ""},
		{"not ready", Health{Ready: false, Agent: fresh}, SkipNotReady, "is not Ready"},
		{"powered off: not ready and silent", Health{}, SkipNotReady, "is not Ready"},
		{"never had an agent", Health{Ready: true}, SkipNoAgent, "no slipway agent has reported from node n1"},
		{"agent silent too long", Health{Ready: true, Agent: Heartbeat{Reported: true, SilentFor: 4 * time.Minute}}, SkipNoAgent,
			"the slipway agent on node n1 has not renewed its heartbeat for 4m0s (more than 3m0s)"},
		{"idle agent within its declared duration", Health{Ready: true, Agent: Heartbeat{Reported: true, SilentFor: 4 * time.Minute, TTL: 15 * time.Minute}}, "", ""},
		{"idle agent silent past its declared duration", Health{Ready: true, Agent: Heartbeat{Reported: true, SilentFor: 16 * time.Minute, TTL: 15 * time.Minute}}, SkipNoAgent,
			"has not renewed its heartbeat for 16m0s (more than 15m0s)"},
		{"cordoned by an admin", Health{Ready: true, Unschedulable: true, Agent: fresh}, SkipUnschedulable, "uncordon"},
		{"cordoned by another tool", Health{Ready: true, Unschedulable: true, CordonedBy: "kured", Agent: fresh}, SkipUnschedulable, "uncordon"},
		{"slipway's own cordon left behind", Health{Ready: true, Unschedulable: true, CordonedBy: "slipway-agent", Agent: fresh}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.h.AgentTTL = ttl
			got := Skip("n1", tc.h, "slipway-agent", now)
			switch {
			case tc.want == "" && got != nil:
				t.Fatalf("skipped: %+v", got)
			case tc.want != "" && (got == nil || got.Reason != tc.want || got.Node != "n1" || !strings.Contains(got.Message, tc.msg) || !got.Since.Time.Equal(now.Truncate(time.Second))):
				t.Fatalf("Skip = %+v, want reason %s, a message with %q, since now", got, tc.want, tc.msg)
			}
		})
	}
}

func TestHeartbeatSilent(t *testing.T) {
	ttl := 3 * time.Minute
	for _, tc := range []struct {
		h    Heartbeat
		want bool
	}{
		{Heartbeat{}, true},
		{Heartbeat{SilentFor: time.Second}, true}, // no Lease held by its node: none reported
		{Heartbeat{Reported: true}, false},
		{Heartbeat{Reported: true, SilentFor: ttl}, false},
		{Heartbeat{Reported: true, SilentFor: ttl + time.Millisecond}, true},
		// An idle agent's Lease declares a longer duration: it counts.
		{Heartbeat{Reported: true, SilentFor: 10 * time.Minute, TTL: 15 * time.Minute}, false},
		{Heartbeat{Reported: true, SilentFor: 16 * time.Minute, TTL: 15 * time.Minute}, true},
		// A shorter one than the caller's does not shorten it.
		{Heartbeat{Reported: true, SilentFor: 2 * time.Minute, TTL: time.Minute}, false},
	} {
		if got := tc.h.Silent(ttl); got != tc.want {
			t.Errorf("%+v.Silent(%s) = %t, want %t", tc.h, ttl, got, tc.want)
		}
	}
}

// TestHeartbeatTTL: how long a renewal counts is the duration its agent
// declares, never under three busy intervals nor over three idle ones.
func TestHeartbeatTTL(t *testing.T) {
	short, long := 3*time.Minute, 15*time.Minute
	for _, tc := range []struct {
		name           string
		declared, s, l time.Duration
		want           time.Duration
	}{
		{"busy agent", short, short, long, short},
		{"idle agent", long, short, long, long},
		{"none declared", 0, short, long, short},
		{"shorter than the controller allows", 30 * time.Second, short, long, short},
		{"an agent of another interval, within the bounds", 5 * time.Minute, short, long, 5 * time.Minute},
		{"longer than an idle agent's: a lie or another setting", 24 * time.Hour, short, long, long},
		{"bounds crossed: the short one wins", time.Hour, short, time.Minute, short},
	} {
		if got := HeartbeatTTL(tc.declared, tc.s, tc.l); got != tc.want {
			t.Errorf("%s: HeartbeatTTL(%s, %s, %s) = %s, want %s", tc.name, tc.declared, tc.s, tc.l, got, tc.want)
		}
	}
}

func TestMergeSkipped(t *testing.T) {
	since := metav1.NewTime(now.Add(-time.Hour))
	prev := []v1.SkippedNode{
		{Node: "a", Reason: SkipNotReady, Since: since},     // checked again, still NotReady: keeps Since
		{Node: "b", Reason: SkipNotReady, Since: since},     // checked again, now eligible: dropped
		{Node: "c", Reason: SkipNoAgent, Since: since},      // not checked again, still behind: kept
		{Node: "d", Reason: SkipNoAgent, Since: since},      // no longer behind (upgraded or deselected): dropped
		{Node: "e", Reason: SkipOtherChannel, Since: since}, // conflict gone: dropped
		{Node: "f", Reason: SkipNotReady, Since: since},     // now cordoned by an admin: new Since
		{Node: "g", Reason: SkipOtherChannel, Since: since}, // conflict stays: keeps Since
	}
	behind := []Node{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "e"}, {Name: "f"}, {Name: "h"}}
	fresh := map[string]*v1.SkippedNode{
		"a": {Node: "a", Reason: SkipNotReady, Since: metav1.NewTime(now)},
		"b": nil,
		"f": {Node: "f", Reason: SkipUnschedulable, Since: metav1.NewTime(now)},
		"h": nil,
	}
	got, total := MergeSkipped(prev, behind, fresh, Unchecked([]Node{{Name: "i"}, {Name: "j", Version: "v1"}}, map[string]string{"g": "default"}, now))
	var summary []string
	for _, e := range got {
		s := e.Node + ":" + e.Reason
		if e.Since.Equal(&since) {
			s += ":old"
		}
		summary = append(summary, s)
	}
	want := []string{"a:NotReady:old", "c:NoAgent:old", "f:Unschedulable", "g:OtherChannel:old", "i:UnknownVersion"}
	if !reflect.DeepEqual(summary, want) || total != 5 {
		t.Fatalf("MergeSkipped = %v (%d), want %v", summary, total, want)
	}
}

func TestSplitByCreation(t *testing.T) {
	sel := func(s string) labels.Selector { l, _ := labels.Parse(s); return l }
	def := ChannelRef{Name: "default", Created: now.Add(-time.Hour), Selector: labels.Everything()}
	canary := ChannelRef{Name: "canary", Created: now, Selector: sel("slipway.dev/channel=canary")}
	twin := ChannelRef{Name: "a-twin", Created: now, Selector: sel("slipway.dev/channel=canary")}
	ns := []Node{{Name: "w1"}, {Name: "c1", Labels: map[string]string{"slipway.dev/channel": "canary"}}}
	all := []ChannelRef{canary, def, twin}
	for _, tc := range []struct {
		self       ChannelRef
		mine       []string
		conflicted map[string]string
	}{
		{def, []string{"w1", "c1"}, map[string]string{}},  // the earliest keeps every node
		{canary, nil, map[string]string{"c1": "default"}}, // later: default holds c1
		{twin, nil, map[string]string{"c1": "default"}},   // default is older than both
	} {
		var selected []Node
		for _, n := range ns {
			if tc.self.Selector.Matches(labels.Set(n.Labels)) {
				selected = append(selected, n)
			}
		}
		mine, others := Split(tc.self, all, selected)
		if got := names(mine); !reflect.DeepEqual(got, tc.mine) || !reflect.DeepEqual(others, tc.conflicted) {
			t.Errorf("%s: mine %v others %v, want %v %v", tc.self.Name, got, others, tc.mine, tc.conflicted)
		}
	}
	if !Earlier(twin, canary) || Earlier(canary, twin) {
		t.Error("same creation time: the smaller name is earlier")
	}
	// Without default, the twins conflict with each other: the smaller name keeps c1.
	if mine, others := Split(canary, []ChannelRef{canary, twin}, ns[1:]); len(mine) != 0 || others["c1"] != "a-twin" {
		t.Errorf("canary beside a-twin: mine %v others %v", names(mine), others)
	}
	if mine, _ := Split(twin, []ChannelRef{canary, twin}, ns[1:]); len(mine) != 1 {
		t.Errorf("a-twin beside canary keeps c1: mine %v", names(mine))
	}
}

func TestSetConflict(t *testing.T) {
	var st v1.UpdateChannelStatus
	if !SetConflict(&st, map[string]string{"c1": "default"}, 1) {
		t.Fatal("a new conflict must be reported")
	}
	if SetConflict(&st, map[string]string{"c1": "default"}, 1) {
		t.Error("the same conflict reported twice")
	}
	if SetConflict(&st, nil, 1) {
		t.Error("a conflict that ends is no news")
	}
	c := st.Conditions[0]
	if c.Type != ConditionConflict || c.Status != metav1.ConditionFalse {
		t.Errorf("condition = %+v", c)
	}
}

func TestAbandoned(t *testing.T) {
	ttl := 3 * time.Minute
	beat := func(silent time.Duration) Heartbeat { return Heartbeat{Reported: true, SilentFor: silent} }
	ready := SlotNode{Exists: true, Ready: true, AgentKnown: true, Agent: beat(time.Minute)}
	for _, tc := range []struct {
		name  string
		phase string
		node  SlotNode
		want  bool
		msg   string
	}{
		{"healthy", PhaseUpgrading, ready, false, ""},
		{"its heartbeat just read for the first time", PhaseUpgrading, SlotNode{Exists: true, Ready: true, AgentKnown: true, Agent: beat(0)}, false, ""},
		{"powered off while its job ran", PhaseUpgrading, SlotNode{Exists: true, NotReadyFor: 2 * time.Minute, AgentKnown: true, Agent: beat(2 * time.Minute)}, true, "turned NotReady 2m0s ago"},
		{"not ready a moment", PhasePending, SlotNode{Exists: true, NotReadyFor: 10 * time.Second, AgentKnown: true, Agent: beat(0)}, false, ""},
		{"agent gone mid-drain", PhaseDraining, SlotNode{Exists: true, Ready: true, AgentKnown: true, Agent: beat(10 * time.Minute)}, true,
			"the slipway agent of node n stopped reporting: its heartbeat has not been renewed for 10m0s (more than 3m0s)"},
		{"no agent at all", PhasePending, SlotNode{Exists: true, Ready: true, AgentKnown: true}, true, "node n has no slipway agent reporting"},
		{"heartbeat unreadable: cannot tell", PhasePending, SlotNode{Exists: true, Ready: true}, false, ""},
		{"not ready after the reboot is the upgrade's failure", PhaseRebooting, SlotNode{Exists: true, NotReadyFor: 2 * time.Minute}, false, ""},
		{"agent silent after the reboot asked: Stale decides", PhaseRebooting, SlotNode{Exists: true, Ready: true, AgentKnown: true, Agent: beat(10 * time.Minute)}, false, ""},
		{"deleted: Stale decides", PhaseUpgrading, SlotNode{}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := Abandoned(v1.Slot{Node: "n", Phase: tc.phase}, tc.node, ttl, now)
			if got != tc.want || got && !strings.Contains(why, tc.msg) {
				t.Fatalf("Abandoned = %v %q, want %v with %q", got, why, tc.want, tc.msg)
			}
		})
	}
}

func TestServersFirst(t *testing.T) {
	srv := func(name, role string) Node {
		return Node{Name: name, UID: name, Version: "v1", Labels: map[string]string{role: "true"}}
	}
	w := func(name string) Node { return Node{Name: name, UID: name, Version: "v1"} }
	s1, s2, s3 := srv("s1", "node-role.kubernetes.io/control-plane"), srv("s2", "node-role.kubernetes.io/etcd"), srv("s3", "node-role.kubernetes.io/master")
	for _, tc := range []struct {
		name          string
		candidates    []Node
		behind, slots int
		want          []string
	}{
		{"no servers behind: all", []Node{w("w1"), w("w2")}, 0, 0, []string{"w1", "w2"}},
		{"servers behind: one server only", []Node{w("w1"), s1, s2, s3}, 3, 0, []string{"s1"}},
		{"a server upgrading: nothing else", []Node{w("w1"), s2}, 2, 1, nil},
		{"server behind in backoff: workers wait", []Node{w("w1")}, 1, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := names(ServersFirst(tc.candidates, tc.behind, tc.slots)); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ServersFirst = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestAssign runs whole passes of the fleet view over a status.
func TestAssign(t *testing.T) {
	retry := Retry{Base: time.Minute, Max: time.Hour}
	eligible := func(ns []Node) map[string]*v1.SkippedNode {
		out := map[string]*v1.SkippedNode{}
		for _, n := range ns {
			out[n.Name] = nil
		}
		return out
	}
	t.Run("servers one at a time before the others whatever the concurrency", func(t *testing.T) {
		s := settings(t, v1.UpdateChannelSpec{Version: "v2", Concurrency: 5})
		ns := nodes(6, "v1")
		for i := range 3 {
			ns[i].Labels["node-role.kubernetes.io/control-plane"] = "true"
		}
		var st v1.UpdateChannelStatus
		var order []string
		for pass := 0; pass < 10 && len(order) < 6; pass++ {
			added := Assign(s, &st, ns, nil, eligible(ns), "v2", retry, now)
			if len(st.Updating) > 1 && pass < 3 {
				t.Fatalf("pass %d: %d slots while servers are behind: %+v", pass, len(st.Updating), st.Updating)
			}
			order = append(order, added...)
			for _, sl := range st.Updating { // every slot finishes before the next pass
				for i := range ns {
					if ns[i].Name == sl.Node {
						ns[i].Version = "v2"
					}
				}
				Succeed(&st, sl.Node)
			}
		}
		sort.Strings(order[:3])
		if len(order) != 6 || !reflect.DeepEqual(order[:3], []string{"node0", "node1", "node2"}) {
			t.Fatalf("order = %v, want the three servers one by one, then the three others", order)
		}
	})
	t.Run("skipped nodes take no slot and their failures do not degrade", func(t *testing.T) {
		s := settings(t, v1.UpdateChannelSpec{Version: "v2", Concurrency: 2})
		ns := nodes(4, "v1")
		st := v1.UpdateChannelStatus{Failed: []v1.Failure{{Node: "node0", Version: "v2", Attempts: 1, At: metav1.NewTime(now)}}}
		checked := eligible(ns)
		checked["node0"] = &v1.SkippedNode{Node: "node0", Reason: SkipNotReady}
		checked["node1"] = &v1.SkippedNode{Node: "node1", Reason: SkipUnschedulable}
		added := Assign(s, &st, ns, nil, checked, "v2", retry, now)
		sort.Strings(added)
		if !reflect.DeepEqual(added, []string{"node2", "node3"}) {
			t.Fatalf("added %v, want node2 node3 (node0 powered off after failing, node1 cordoned by an admin)", added)
		}
		if Degraded(s, st, "v2") || st.Counts.Skipped != 2 || len(st.Skipped) != 2 {
			t.Fatalf("degraded %v, counts %+v, skipped %+v", Degraded(s, st, "v2"), st.Counts, st.Skipped)
		}
	})
	t.Run("unchecked nodes wait for their check", func(t *testing.T) {
		s := settings(t, v1.UpdateChannelSpec{Version: "v2", Concurrency: 3})
		ns := nodes(3, "v1")
		var st v1.UpdateChannelStatus
		if added := Assign(s, &st, ns, nil, map[string]*v1.SkippedNode{"node1": nil}, "v2", retry, now); !reflect.DeepEqual(added, []string{"node1"}) {
			t.Fatalf("added %v, want only the checked node1", added)
		}
	})
	t.Run("a later channel skips the nodes of an earlier one", func(t *testing.T) {
		s := settings(t, v1.UpdateChannelSpec{Version: "v2", Concurrency: 3})
		ns := nodes(3, "v1")
		var st v1.UpdateChannelStatus
		added := Assign(s, &st, ns[1:], map[string]string{"node0": "default"}, eligible(ns), "v2", retry, now)
		if len(added) != 2 || st.Counts.Nodes != 2 || len(st.Skipped) != 1 || st.Skipped[0].Reason != SkipOtherChannel {
			t.Fatalf("added %v counts %+v skipped %+v", added, st.Counts, st.Skipped)
		}
	})
}
