package plan

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

func TestUnavailable(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	st := v1.UpdateChannelStatus{Updating: []v1.Slot{{Node: "held"}}}
	cases := []struct {
		name  string
		nodes []Availability
		want  string
	}{
		{"all up", []Availability{{Name: "a", Ready: true}, {Name: "b", Ready: true}}, ""},
		{"NotReady without a slot", []Availability{{Name: "b", Ready: false, ReadySince: t0}, {Name: "a", Ready: true}}, "b:NotReady"},
		{"a slot holder down counts as its slot only", []Availability{{Name: "held", Ready: false}, {Name: "a", Ready: true}}, ""},
		{"slipway's cordon left without a slot", []Availability{{Name: "c", Ready: true, CordonedBySlipway: true}}, "c:cordoned by slipway"},
		{"NotReady and cordoned: NotReady, once", []Availability{{Name: "d", CordonedBySlipway: true}}, "d:NotReady"},
		{"sorted by name", []Availability{{Name: "z"}, {Name: "m"}, {Name: "a", Ready: true}}, "m:NotReady,z:NotReady"},
	}
	for _, c := range cases {
		var got []string
		for _, d := range Unavailable(st, c.nodes) {
			got = append(got, d.Node+":"+d.Why)
		}
		if strings.Join(got, ",") != c.want {
			t.Errorf("%s: %v, want %s", c.name, got, c.want)
		}
	}
}

func TestFreeSlotsBeside(t *testing.T) {
	slots := func(n int) v1.UpdateChannelStatus {
		var st v1.UpdateChannelStatus
		for range n {
			st.Updating = append(st.Updating, v1.Slot{})
		}
		return st
	}
	cases := []struct {
		concurrency, slots, down, want int
	}{
		{1, 0, 0, 1},
		{1, 0, 1, 0}, // a NotReady worker spends a concurrency-1 channel's budget
		{3, 1, 1, 1},
		{2, 1, 3, 0}, // never below zero
		{2, 3, 0, 0}, // concurrency lowered below the slots held
		{2, 0, -1, 2},
	}
	for _, c := range cases {
		if got := FreeSlotsBeside(Settings{Concurrency: c.concurrency}, slots(c.slots), c.down); got != c.want {
			t.Errorf("concurrency %d, %d slots, %d down: %d free, want %d", c.concurrency, c.slots, c.down, got, c.want)
		}
	}
}

func TestAssignWithDownNodes(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	nodes := []Node{{Name: "a", UID: "a", Version: "v1"}, {Name: "b", UID: "b", Version: "v1"}, {Name: "c", UID: "c", Version: "v1"}}
	checked := map[string]*v1.SkippedNode{"a": nil, "b": nil, "c": nil}
	for _, c := range []struct {
		concurrency int
		down        []string
		want        string
	}{
		{1, nil, "1"},
		{1, []string{"x"}, "0"},
		{3, []string{"x"}, "2"},
		{3, []string{"x", "y", "z"}, "0"},
		// b left cordoned by slipway: it may take the slot, which costs nothing more
		{1, []string{"b"}, "b"},
		{2, []string{"b", "x"}, "b"},
	} {
		st := v1.UpdateChannelStatus{}
		s := Settings{Concurrency: c.concurrency, MaxFailures: 3, Selector: labels.Everything()}
		added := AssignWith(s, &st, nodes, nil, checked, "v2", DefaultRetry, now, Beside{Down: c.down})
		got := fmt.Sprint(len(added))
		if len(c.want) > 0 && c.want[0] >= 'a' {
			got = strings.Join(added, ",")
		}
		if got != c.want {
			t.Errorf("concurrency %d beside %v down: granted %v, want %s", c.concurrency, c.down, added, c.want)
		}
	}
}

func TestSetCapacityHeld(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	s := Settings{Concurrency: 1, NodeReadyTimeout: 10 * time.Minute}
	cases := []struct {
		name           string
		down           []Down
		status, reason string
		says           []string
	}{
		{"none down", nil, "False", "AllAvailable", nil},
		{"a worker NotReady a minute", []Down{{Node: "w5", Why: "NotReady", Since: now.Add(-time.Minute)}}, "True", "NodesUnavailable", []string{"w5 (NotReady)", "concurrency 1"}},
		{"a cordon left", []Down{{Node: "w4", Why: "cordoned by slipway"}}, "True", "NodesUnavailable", []string{"w4 (cordoned by slipway)"}},
		{"NotReady past nodeReadyTimeout", []Down{{Node: "w4", Why: "cordoned by slipway"}, {Node: "w5", Why: "NotReady", Since: now.Add(-time.Hour)}}, "True", "NodeDownTooLong",
			[]string{"w5 NotReady for longer than nodeReadyTimeout", "delete the Node", "nodeSelector"}},
	}
	for _, c := range cases {
		var st v1.UpdateChannelStatus
		if !SetCapacityHeld(s, &st, c.down, now, 3) {
			t.Errorf("%s: not changed from no condition", c.name)
		}
		got := meta.FindStatusCondition(st.Conditions, ConditionCapacityHeld)
		if string(got.Status) != c.status || got.Reason != c.reason {
			t.Errorf("%s: %s/%s, want %s/%s", c.name, got.Status, got.Reason, c.status, c.reason)
		}
		for _, w := range c.says {
			if !strings.Contains(got.Message, w) {
				t.Errorf("%s: message %q does not say %q", c.name, got.Message, w)
			}
		}
		if SetCapacityHeld(s, &st, c.down, now.Add(time.Second), 3) {
			t.Errorf("%s: a second later, the same nodes changed the condition (a write per pass)", c.name)
		}
	}
}

func TestNextDownTooLong(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	down := []Down{{Node: "a", Why: "NotReady", Since: now.Add(-8 * time.Minute)}, {Node: "b", Why: "NotReady", Since: now.Add(-time.Hour)},
		{Node: "c", Why: "cordoned by slipway"}, {Node: "d", Why: "NotReady", Since: now.Add(-2 * time.Minute)}}
	if got, want := NextDownTooLong(down, 10*time.Minute, now), now.Add(2*time.Minute); !got.Equal(want) {
		t.Errorf("next %s, want %s", got, want)
	}
	if got := DownTooLong(down, 10*time.Minute, now); len(got) != 1 || got[0].Node != "b" {
		t.Errorf("too long: %v, want b", got)
	}
	if got := NextDownTooLong(nil, time.Minute, now); !got.IsZero() {
		t.Errorf("nothing down: next %s", got)
	}
}

func TestMayCordon(t *testing.T) {
	up := func(n string) Availability { return Availability{Name: n, Ready: true} }
	cases := []struct {
		name        string
		concurrency int
		nodes       []Availability
		ok          bool
		spent       string
	}{
		{"all up", 1, []Availability{up("a"), up("b")}, true, ""},
		{"itself NotReady does not count", 1, []Availability{{Name: "a"}, up("b")}, true, ""},
		{"another NotReady at concurrency 1", 1, []Availability{up("a"), {Name: "b"}}, false, "b"},
		{"another NotReady at concurrency 2", 2, []Availability{up("a"), {Name: "b"}, up("c")}, true, ""},
		{"one NotReady and one drained at concurrency 2", 2, []Availability{up("a"), {Name: "b"}, {Name: "c", Ready: true, CordonedBySlipway: true}}, false, "b,c"},
	}
	for _, c := range cases {
		ok, spent := MayCordon(Settings{Concurrency: c.concurrency}, "a", c.nodes)
		var names []string
		for _, d := range spent {
			names = append(names, d.Node)
		}
		if ok != c.ok || strings.Join(names, ",") != c.spent {
			t.Errorf("%s: %t %v, want %t %s", c.name, ok, names, c.ok, c.spent)
		}
	}
}
