package monitor

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestCordonInvariants(t *testing.T) {
	const cp = "node-role.kubernetes.io/control-plane"
	at := time.Unix(1000, 0)
	start := func(n string) []CordonStart { return []CordonStart{{Node: n, At: at}} }
	key := func(n string) []string { return []string{n + "@" + at.UTC().Format(time.RFC3339Nano)} }
	for _, tc := range []struct {
		name  string
		check func(State, Limits) ([]Finding, error)
		s     State
		want  []string
	}{
		{"budget: a cordon beside nothing down", CordonWithinBudget,
			State{Nodes: nodes(cordoned(ready("a")), ready("b")), Channels: []ChannelObs{{Name: "c"}}, Cordons: start("a")}, nil},
		{"budget: a cordon beside a NotReady node, concurrency 1", CordonWithinBudget,
			State{Nodes: nodes(cordoned(ready("a")), notReady(ready("b"))), Channels: []ChannelObs{{Name: "c"}}, Cordons: start("a")}, key("a")},
		{"budget: concurrency 2 leaves room", CordonWithinBudget,
			State{Nodes: nodes(cordoned(ready("a")), notReady(ready("b"))), Channels: []ChannelObs{{Name: "c", Concurrency: 2}}, Cordons: start("a")}, nil},
		{"budget: a fault alone (no cordon begun) is no finding", CordonWithinBudget,
			State{Nodes: nodes(cordoned(ready("a")), notReady(ready("b"))), Channels: []ChannelObs{{Name: "c"}}}, nil},
		{"budget: another channel's nodes do not count", CordonWithinBudget,
			State{Nodes: nodes(cordoned(ready("a", "pool", "a")), notReady(ready("b", "pool", "b"))),
				Channels: []ChannelObs{{Name: "c", Selector: poolSel("a")}}, Cordons: start("a")}, nil},
		{"control plane: a server cordoned beside a NotReady one", CordonControlPlaneAlone,
			State{Nodes: nodes(cordoned(ready("s1", cp, "")), notReady(ready("s2", cp, "")), ready("s3", cp, "")),
				Channels: []ChannelObs{{Name: "c", Concurrency: 3}}, Cordons: start("s1")}, key("s1")},
		{"control plane: a worker cordoned beside a NotReady server", CordonControlPlaneAlone,
			State{Nodes: nodes(cordoned(ready("w1")), notReady(ready("s2", cp, ""))), Channels: []ChannelObs{{Name: "c", Concurrency: 3}}, Cordons: start("w1")}, nil},
		{"control plane: a server cordoned alone", CordonControlPlaneAlone,
			State{Nodes: nodes(cordoned(ready("s1", cp, "")), notReady(ready("w1"))), Channels: []ChannelObs{{Name: "c", Concurrency: 3}}, Cordons: start("s1")}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, err := tc.check(tc.s, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if got := keys(fs); !equal(got, tc.want) {
				t.Errorf("findings %v, want %v: %+v", got, tc.want, fs)
			}
		})
	}
}

// TestPlantedCordonIntoSpentBudget: a node made NotReady beside a cordon
// (a fault, not slipway's step) breaks channel-concurrency but not
// cordon-within-budget; slipway cordoning another node while that node is
// still NotReady breaks cordon-within-budget, naming it.
func TestPlantedCordonIntoSpentBudget(t *testing.T) {
	w := newWorld(t, Config{})
	w.channel("cb", 1, "cb")
	for _, n := range []string{"cb-1", "cb-2", "cb-3"} {
		w.node(n, map[string]string{"pool": "cb"})
	}
	w.cordon("cb-1")
	w.caughtUp("cb-1")
	w.quiet("one cordon of concurrency 1")
	w.status("cb-3", "", false) // a fault: powered off beside the slot
	w.expect(InvChannelConcurrency)
	w.uncordon("cb-1")
	w.caughtUp("cb-1")
	for _, v := range w.m.Violations() {
		if v.Invariant == InvCordonBudget {
			t.Fatalf("a fault alone reported as slipway's cordon: %v", v)
		}
	}
	w.cordon("cb-2")
	v := w.expect(InvCordonBudget)
	if !strings.Contains(v.Message, "cordoned cb-2") || !strings.Contains(v.Message, "cb-3 (NotReady)") {
		t.Errorf("message: %s", v.Message)
	}
	if len(v.History["Node//cb-3"]) == 0 || len(v.History["Node//cb-2"]) == 0 {
		t.Errorf("history lacks the nodes: %v", v)
	}
}

// TestPlantedCordonBesideDownServer: a control-plane node cordoned while
// another is NotReady with no cordon (down is down, slot or not), within
// the channel's concurrency of 3.
func TestPlantedCordonBesideDownServer(t *testing.T) {
	w := newWorld(t, Config{})
	w.channel("cs", 3, "cs")
	for _, n := range []string{"cs-1", "cs-2", "cs-3"} {
		w.node(n, map[string]string{"pool": "cs", controlPlane: ""})
	}
	w.cordon("cs-1")
	w.caughtUp("cs-1")
	w.uncordon("cs-1")
	w.caughtUp("cs-1")
	w.quiet("a server cordoned alone")
	w.status("cs-2", "", false)
	w.cordon("cs-3")
	v := w.expect(InvCordonControlPlane)
	if !strings.Contains(v.Message, "cs-3") || !strings.Contains(v.Message, "cs-2 (NotReady)") {
		t.Errorf("message: %s", v.Message)
	}
	for _, vv := range w.m.Violations() {
		if vv.Invariant == InvCordonBudget {
			t.Errorf("cordon-within-budget reported within concurrency 3: %v", vv)
		}
	}
}

func poolSel(p string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"pool": p}}
}

// TestPlantedCordonOnceQuiet: a slipway cordon left after the last slot
// ended is reported by CheckQuiet; while a slot is held it is not.
func TestPlantedCordonOnceQuiet(t *testing.T) {
	w := newWorld(t, Config{})
	w.channel("cq", 1, "cq")
	w.node("cq-1", map[string]string{"pool": "cq"})
	w.node("cq-2", map[string]string{"pool": "cq"})
	w.cordon("cq-1")
	w.caughtUp("cq-1")
	w.uncordon("cq-1")
	w.caughtUp("cq-1")
	w.m.CheckQuiet()
	w.quiet("every cordon lifted")
	w.cordon("cq-2")
	w.caughtUp("cq-2")
	w.m.CheckQuiet()
	v := w.expect(InvCordonOnceQuiet)
	if !strings.Contains(v.Message, "cq-2") || len(v.History["Node//cq-2"]) == 0 {
		t.Errorf("violation %v", v)
	}
	fs, err := NoCordonOnceQuiet(State{Nodes: nodes(cordoned(ready("a"))), Channels: []ChannelObs{{Name: "c", Slots: []string{"a"}}}}, Limits{})
	if err != nil || len(fs) != 0 {
		t.Errorf("a cordon under its slot reported: %v %v", fs, err)
	}
}
