package monitor

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/swarm/appcheck"
)

func ready(name string, lbl ...string) NodeObs {
	l := map[string]string{}
	for i := 0; i+1 < len(lbl); i += 2 {
		l[lbl[i]] = lbl[i+1]
	}
	return NodeObs{Name: name, Labels: l, Ready: true, BootID: "b-" + name}
}

func cordoned(n NodeObs) NodeObs { n.Unschedulable, n.CordonedBy = true, "slipway-agent"; return n }
func notReady(n NodeObs) NodeObs { n.Ready = false; return n }
func inFlight(n NodeObs) NodeObs { n.InFlight = true; return n }

func nodes(ns ...NodeObs) map[string]NodeObs {
	m := map[string]NodeObs{}
	for _, n := range ns {
		m[n.Name] = n
	}
	return m
}

func keys(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Key)
	}
	return out
}

func TestInvariants(t *testing.T) {
	const cp = "node-role.kubernetes.io/control-plane"
	pool := &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}}
	t0 := time.Unix(1000, 0)
	burst := func(n int, step time.Duration) []time.Time {
		var ts []time.Time
		for i := range n {
			ts = append(ts, t0.Add(time.Duration(i)*step))
		}
		return ts
	}
	for _, tc := range []struct {
		name  string
		check func(State, Limits) ([]Finding, error)
		s     State
		l     Limits
		want  []string
	}{
		{"channel: one cordon within concurrency 1", ChannelConcurrency,
			State{Nodes: nodes(cordoned(ready("a")), ready("b")), Channels: []ChannelObs{{Name: "c"}}}, Limits{}, nil},
		{"channel: two cordons beyond concurrency 1 (0 is 1)", ChannelConcurrency,
			State{Nodes: nodes(cordoned(ready("a")), cordoned(ready("b"))), Channels: []ChannelObs{{Name: "c"}}}, Limits{}, []string{"/c"}},
		{"channel: a NotReady node counts", ChannelConcurrency,
			State{Nodes: nodes(cordoned(ready("a")), notReady(ready("b"))), Channels: []ChannelObs{{Name: "c", Concurrency: 1}}}, Limits{}, []string{"/c"}},
		{"channel: concurrency 2 allows two", ChannelConcurrency,
			State{Nodes: nodes(cordoned(ready("a")), notReady(ready("b"))), Channels: []ChannelObs{{Name: "c", Concurrency: 2}}}, Limits{}, nil},
		{"channel: an unmarked cordon (an admin's) does not count", ChannelConcurrency,
			State{Nodes: nodes(cordoned(ready("a")), func() NodeObs { n := ready("b"); n.Unschedulable = true; return n }()), Channels: []ChannelObs{{Name: "c"}}}, Limits{}, nil},
		{"channel: nodes outside the selector do not count", ChannelConcurrency,
			State{Nodes: nodes(cordoned(ready("a", "pool", "a")), cordoned(ready("b", "pool", "b"))), Channels: []ChannelObs{{Name: "c", Selector: pool}}}, Limits{}, nil},
		{"channel: a node holding a slot counts though unselected", ChannelConcurrency,
			State{Nodes: nodes(cordoned(ready("a", "pool", "a")), cordoned(ready("b", "pool", "b"))), Channels: []ChannelObs{{Name: "c", Selector: pool, Slots: []string{"b"}}}}, Limits{}, []string{"/c"}},
		{"control plane: one down", ControlPlaneOneDown,
			State{Nodes: nodes(cordoned(ready("s1", cp, "")), ready("s2", cp, ""), ready("s3", cp, "")), Channels: []ChannelObs{{Name: "c", Concurrency: 3}}}, Limits{}, nil},
		{"control plane: one cordoned, one NotReady", ControlPlaneOneDown,
			State{Nodes: nodes(cordoned(ready("s1", cp, "")), notReady(ready("s2", cp, "")), ready("s3", cp, "")), Channels: []ChannelObs{{Name: "c", Concurrency: 3}}}, Limits{}, []string{"control-plane"}},
		{"control plane: across two channels", ControlPlaneOneDown,
			State{Nodes: nodes(cordoned(ready("s1", cp, "", "pool", "a")), cordoned(ready("s2", cp, "", "pool", "b"))),
				Channels: []ChannelObs{{Name: "a", Selector: pool}, {Name: "b", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "b"}}}}}, Limits{}, []string{"control-plane"}},
		{"control plane: workers do not count", ControlPlaneOneDown,
			State{Nodes: nodes(cordoned(ready("s1", cp, "")), notReady(ready("w1"))), Channels: []ChannelObs{{Name: "c", Concurrency: 3}}}, Limits{}, nil},
		{"reboot: cordoned before", RebootWithoutDrain,
			State{Reboots: []Reboot{{Node: "a", From: "1", To: "2", Cordoned: true}}}, Limits{}, nil},
		{"reboot: no cordon", RebootWithoutDrain,
			State{Reboots: []Reboot{{Node: "a", From: "1", To: "2"}}}, Limits{}, []string{"a@2"}},
		{"reboot: a first boot ID is no reboot", RebootWithoutDrain,
			State{Reboots: []Reboot{{Node: "a", From: "", To: "2"}}}, Limits{}, nil},
		{"reboot slot: held", RebootWithoutSlot,
			State{Reboots: []Reboot{{Node: "a", From: "1", To: "2", Cordoned: true, Slot: true, Channels: []string{"ns/c"}}}}, Limits{}, nil},
		{"reboot slot: cordoned, no slot", RebootWithoutSlot,
			State{Reboots: []Reboot{{Node: "a", From: "1", To: "2", Cordoned: true, Channels: []string{"ns/c"}}}}, Limits{}, []string{"a@2"}},
		{"reboot slot: no channel selects the node", RebootWithoutSlot,
			State{Reboots: []Reboot{{Node: "a", From: "1", To: "2"}}}, Limits{}, nil},
		{"reboot slot: a first boot ID is no reboot", RebootWithoutSlot,
			State{Reboots: []Reboot{{Node: "a", From: "", To: "2", Channels: []string{"ns/c"}}}}, Limits{}, nil},
		{"operator: within max", OperatorInFlight,
			State{Nodes: nodes(inFlight(ready("a")), ready("b"))}, Limits{OperatorMaxConcurrent: 1}, nil},
		{"operator: beyond max", OperatorInFlight,
			State{Nodes: nodes(inFlight(ready("a")), inFlight(ready("b")))}, Limits{OperatorMaxConcurrent: 1}, []string{"update-operator"}},
		{"operator: not checked without a max", OperatorInFlight,
			State{Nodes: nodes(inFlight(ready("a")), inFlight(ready("b")))}, Limits{}, nil},
		{"writes: 20 in a second is the bound", HotLoops,
			State{Writes: map[string][]time.Time{"Node//a": burst(20, 10*time.Millisecond)}}, Limits{}, nil},
		{"writes: 50 in a second", HotLoops,
			State{Writes: map[string][]time.Time{"Node//a": burst(50, 10*time.Millisecond)}}, Limits{}, []string{"Node//a"}},
		{"writes: 50 spread over 10 s", HotLoops,
			State{Writes: map[string][]time.Time{"Node//a": burst(50, 200*time.Millisecond)}}, Limits{}, nil},
		{"swarm: each job in one hand", DoubleHeld,
			State{Apps: appcheck.Sample{"w1": {"j1"}, "w2": {"j2"}}}, Limits{}, nil},
		{"swarm: a job in two hands", DoubleHeld,
			State{Apps: appcheck.Sample{"w1": {"j1"}, "w2": {"j1", "j2"}}}, Limits{}, []string{"j1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, err := tc.check(tc.s, tc.l)
			if err != nil {
				t.Fatal(err)
			}
			if got := keys(fs); !equal(got, tc.want) {
				t.Errorf("findings %v, want %v: %+v", got, tc.want, fs)
			}
		})
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestBadSelectorIsAnError(t *testing.T) {
	bad := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Nope"}}}
	if _, err := ChannelConcurrency(State{Channels: []ChannelObs{{Name: "c", Selector: bad}}}, Limits{}); err == nil {
		t.Fatal("a channel with an unreadable selector was checked")
	}
}

// BenchmarkCheck is the cost of one check of every invariant (the monitor
// runs one per observed change) over 100 nodes, 3 channels and 500 objects
// written within the window.
func BenchmarkCheck(b *testing.B) {
	s := State{Nodes: map[string]NodeObs{}, Writes: map[string][]time.Time{}, Apps: appcheck.Sample{"w1": {"j1"}, "w2": {"j2"}}}
	for i := range 100 {
		n := ready(fmt.Sprintf("n-%03d", i), "pool", fmt.Sprint(i%3))
		if i%10 == 0 {
			n = cordoned(n)
		}
		s.Nodes[n.Name] = n
	}
	for i := range 3 {
		s.Channels = append(s.Channels, ChannelObs{Name: fmt.Sprint(i), Concurrency: 5,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": fmt.Sprint(i)}}})
	}
	t0 := time.Unix(1000, 0)
	for i := range 500 {
		s.Writes[fmt.Sprintf("Pod/ns/p-%d", i)] = []time.Time{t0, t0.Add(300 * time.Millisecond)}
	}
	l := Limits{OperatorMaxConcurrent: 1}.withDefaults()
	s.NodeList = sortedNodes(s) // as the monitor keeps it
	b.ResetTimer()
	for range b.N {
		for _, inv := range Invariants {
			if _, err := inv.Check(s, l); err != nil {
				b.Fatal(err)
			}
		}
	}
}
