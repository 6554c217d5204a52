package plan

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
)

func old(name string, available bool) []Pod { return []Pod{{Name: name, Available: available}} }

func cur(name string, available bool) *Pod { return &Pod{Name: name, Available: available} }

// outdated is n nodes each with an available pod of the previous template.
func outdated(n int) []NodeState {
	var out []NodeState
	for i := range n {
		out = append(out, NodeState{Node: fmt.Sprintf("n%03d", i), Old: old(fmt.Sprintf("p%03d", i), true)})
	}
	return out
}

func TestRollout(t *testing.T) {
	wide := Limits{MaxUnavailable: 2, MaxCreation: 250}
	tests := []struct {
		name   string
		nodes  []NodeState
		limits Limits
		want   Plan
	}{
		{"new nodes get pods", []NodeState{{Node: "a"}, {Node: "b"}}, wide,
			Plan{Create: []string{"a", "b"}, Unavailable: 2}},
		{"creation budget counts pods not yet available", []NodeState{{Node: "a", Current: cur("x", false)}, {Node: "b"}, {Node: "c"}},
			Limits{MaxUnavailable: 1, MaxCreation: 2}, Plan{Create: []string{"b"}, Unavailable: 3}},
		{"the budget is per template: the active one's failing pods do not hold a canary's creation",
			[]NodeState{{Node: "a", Template: "v1", Current: cur("x1", false)}, {Node: "b", Template: "v1", Current: cur("x2", false)}, {Node: "c", Template: "v2"}},
			Limits{MaxUnavailable: 1, MaxCreation: 1}, Plan{Create: []string{"c"}, Unavailable: 3}},
		{"outdated pods go up to maxUnavailable", outdated(5), wide,
			Plan{Delete: []string{"p000", "p001"}}},
		{"already unavailable nodes use the budget", append(outdated(3), NodeState{Node: "z", Current: cur("x", false)}), wide,
			Plan{Delete: []string{"p000"}, Unavailable: 1}},
		{"unavailable outdated pods go for free", []NodeState{{Node: "a", Old: old("o1", false)}, {Node: "b", Old: old("o2", false)}, {Node: "c", Old: old("o3", true)}},
			Limits{MaxUnavailable: 1, MaxCreation: 1}, Plan{Delete: []string{"o1", "o2"}, Unavailable: 2}},
		{"paused: creations only", append(outdated(2), NodeState{Node: "new"}), Limits{MaxUnavailable: 5, MaxCreation: 5, Paused: true},
			Plan{Create: []string{"new"}, Unavailable: 1}},
		{"frozen: nothing", append(outdated(2), NodeState{Node: "new"}), Limits{MaxUnavailable: 5, MaxCreation: 5, Frozen: true},
			Plan{Unavailable: 1}},
		{"terminating pod: wait, no create", []NodeState{{Node: "a", Old: []Pod{{Name: "o", Terminating: true}}}}, wide,
			Plan{Unavailable: 1}},
		{"an old pod beside an available current one goes", []NodeState{{Node: "a", Current: cur("x", true), Old: old("o", true)}}, wide,
			Plan{Delete: []string{"o"}}},
		{"a node left: its pod goes under the budget, none is created", []NodeState{{Node: "a", Old: old("o1", true), Leave: true}, {Node: "b", Old: old("o2", true), Leave: true}, {Node: "c", Current: cur("x", true)}},
			Limits{MaxUnavailable: 1, MaxCreation: 9}, Plan{Delete: []string{"o1"}}},
		{"a node left, its pod terminating: it holds the budget", []NodeState{{Node: "a", Old: []Pod{{Name: "o1", Terminating: true}}, Leave: true}, {Node: "b", Old: old("o2", true), Leave: true}},
			Limits{MaxUnavailable: 1, MaxCreation: 9}, Plan{Unavailable: 1}},
		{"a node left, paused: it keeps its pod", []NodeState{{Node: "a", Old: old("o1", true), Leave: true}},
			Limits{MaxUnavailable: 1, MaxCreation: 9, Paused: true}, Plan{}},
		{"unresponsive nodes ignored up to maxPodSchedulerFailure",
			append(outdated(2), NodeState{Node: "u1", Current: &Pod{Name: "x", Unresponsive: true}}, NodeState{Node: "u2", Current: &Pod{Name: "y", Unresponsive: true}}),
			Limits{MaxUnavailable: 1, MaxPodSchedulerFailure: 1, MaxCreation: 9}, Plan{Unavailable: 2, Ignored: 1}},
		// Issue 24 item 13: a pod stuck Terminating on a dead node.
		{"a pod stuck terminating is covered by maxPodSchedulerFailure",
			append(outdated(2), NodeState{Node: "dead", Old: []Pod{{Name: "t", Terminating: true, Unresponsive: true}}}),
			Limits{MaxUnavailable: 1, MaxPodSchedulerFailure: 1, MaxCreation: 9}, Plan{Delete: []string{"p000"}, Unavailable: 1, Ignored: 1}},
		{"unresponsive nodes ignored: budget left",
			append(outdated(2), NodeState{Node: "u1", Current: &Pod{Name: "x", Unresponsive: true}}),
			Limits{MaxUnavailable: 1, MaxPodSchedulerFailure: 1, MaxCreation: 9}, Plan{Delete: []string{"p000"}, Unavailable: 1, Ignored: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Rollout(tt.nodes, tt.limits); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Rollout() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestRolloutNeverOverMaxUnavailable walks a whole rollout step by step,
// deleted pods vanishing and new ones becoming available one step later,
// and checks that no step leaves more than maxUnavailable nodes without an
// available pod.
func TestRolloutNeverOverMaxUnavailable(t *testing.T) {
	nodes := outdated(37)
	const maxUnavailable = 5
	for step := 0; step < 100; step++ {
		p := Rollout(nodes, Limits{MaxUnavailable: maxUnavailable, MaxCreation: 3})
		deleted := map[string]bool{}
		for _, d := range p.Delete {
			deleted[d] = true
		}
		created := map[string]bool{}
		for _, c := range p.Create {
			created[c] = true
		}
		unavailable := 0
		done := true
		for i := range nodes {
			n := &nodes[i]
			if n.Current != nil {
				n.Current.Available = true
			}
			if len(n.Old) > 0 && deleted[n.Old[0].Name] {
				n.Old = nil
			}
			if created[n.Node] {
				n.Current = cur("new-"+n.Node, false)
			}
			if !nodeAvailable(*n) {
				unavailable++
			}
			done = done && n.Current != nil && n.Current.Available
		}
		if unavailable > maxUnavailable {
			t.Fatalf("step %d: %d nodes unavailable, over maxUnavailable %d", step, unavailable, maxUnavailable)
		}
		if done {
			return
		}
	}
	t.Fatal("the rollout did not finish in 100 steps")
}

func TestSlowStart(t *testing.T) {
	tests := []struct {
		max, inc int
		interval time.Duration
		elapsed  time.Duration
		want     int
	}{
		{250, 1, time.Minute, 0, 1},
		{250, 1, time.Minute, 90 * time.Second, 2},
		{250, 5, time.Minute, 10 * time.Minute, 55},
		{10, 5, time.Minute, 10 * time.Minute, 10},
		{250, 100, time.Minute, 0, 100},
		{3, 1, 0, time.Hour, 1},
		{250, 1, time.Nanosecond, 1000 * time.Hour, 250},
	}
	for _, tt := range tests {
		if got := SlowStart(tt.max, tt.inc, tt.interval, tt.elapsed); got != tt.want {
			t.Errorf("SlowStart(%d, %d, %v, %v) = %d, want %d", tt.max, tt.inc, tt.interval, tt.elapsed, got, tt.want)
		}
	}
}

func TestScaled(t *testing.T) {
	pct, n, bad := intstr.FromString("10%"), intstr.FromInt32(3), intstr.FromString("ten")
	tests := []struct {
		v       *intstr.IntOrString
		total   int
		want    int
		wantErr bool
	}{
		{nil, 100, 7, false},
		{&pct, 100, 10, false},
		{&pct, 15, 2, false},
		{&n, 100, 3, false},
		{&bad, 100, 0, true},
	}
	for _, tt := range tests {
		got, err := Scaled(tt.v, tt.total, 7)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("Scaled(%v, %d) = %d, %v; want %d, error %v", tt.v, tt.total, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestFailedPodBackoff(t *testing.T) {
	for failures, want := range map[int]time.Duration{0: 0, 1: time.Second, 2: 2 * time.Second, 4: 8 * time.Second, 9: 256 * time.Second, 10: 5 * time.Minute, 100: 5 * time.Minute} {
		if got := FailedPodBackoff(failures); got != want {
			t.Errorf("FailedPodBackoff(%d) = %v, want %v", failures, got, want)
		}
	}
}
