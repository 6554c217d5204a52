package updateoperator

import (
	"fmt"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/drain"
)

// The record's change of an uncordon, before and after its Node write.
func TestUncordonRecord(t *testing.T) {
	k := Keys{Prefix: DefaultPrefix}
	finish := map[string]any{k.Wanted(): string(IntentStabilize), k.Key(KeyDrainStarted): nil}
	for _, c := range []struct {
		name   string
		also   map[string]any
		lifted bool
		want   map[string]any
	}{
		{"before the Node write: what is written beside it, the cordon kept", finish, false, finish},
		{"before, nothing beside it", nil, false, map[string]any{}},
		{"before, a cordon key in also is not the record's to drop yet",
			map[string]any{k.Wanted(): string(IntentReset), drain.AnnotationCordonedBy: nil, drain.AnnotationSchedulableBefore: nil}, false,
			map[string]any{k.Wanted(): string(IntentReset)}},
		{"after: the cordon dropped, nothing else", finish, true, map[string]any{drain.AnnotationCordonedBy: nil, drain.AnnotationSchedulableBefore: nil}},
	} {
		if got := UncordonRecord(c.also, c.lifted); !maps.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if _, ok := finish[drain.AnnotationCordonedBy]; ok {
		t.Error("UncordonRecord changed its argument")
	}
}

// What an uncordon decides from: the Node as it is, the record's
// schedulable-before.
func TestCordonToLift(t *testing.T) {
	k := Keys{Prefix: DefaultPrefix}
	owner := k.CordonOwner()
	node := func(unschedulable bool, a map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "7", Annotations: a}, Spec: corev1.NodeSpec{Unschedulable: unschedulable}}
	}
	ours := func(before string) map[string]string {
		return map[string]string{drain.AnnotationCordonedBy: owner, drain.AnnotationSchedulableBefore: before, "other": "x"}
	}
	recorded := node(true, ours("true")) // the overlay: the record's cordon
	for _, c := range []struct {
		name     string
		node     *corev1.Node
		recorded *corev1.Node
		lift     bool
		before   string // the copy's schedulable-before, when lift
	}{
		{"the Node carries the operator's cordon: lifted", node(true, ours("true")), recorded, true, "true"},
		{"the Node's schedulable-before changed (by the node): the record's", node(true, ours("true")), node(true, ours("false")), true, "false"},
		{"lifted already (a leader stopped after the Node write)", node(false, map[string]string{"other": "x"}), recorded, false, ""},
		{"an admin's cordon since (no owner recorded): left", node(true, map[string]string{"other": "x"}), recorded, false, ""},
		{"another prefix's cordon: left", node(true, map[string]string{drain.AnnotationCordonedBy: CordonOwner + ".other.example.com"}), recorded, false, ""},
		{"the k3os agent's cordon: left", node(true, map[string]string{drain.AnnotationCordonedBy: "slipway-ops-agent"}), recorded, false, ""},
		{"no Node", nil, recorded, false, ""},
		{"no record overlaid (not imported yet): the Node's own", node(true, ours("false")), nil, true, "false"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var before *corev1.Node
			if c.node != nil {
				before = c.node.DeepCopy()
			}
			seen, lift := CordonToLift(c.node, c.recorded, owner)
			if lift != c.lift {
				t.Fatalf("lift %v, want %v", lift, c.lift)
			}
			if !lift {
				if seen != nil {
					t.Errorf("a copy to lift from, with nothing to lift: %v", seen.Annotations)
				}
				return
			}
			if got := seen.Annotations[drain.AnnotationSchedulableBefore]; got != c.before {
				t.Errorf("schedulable-before %q, want %q", got, c.before)
			}
			if seen.ResourceVersion != c.node.ResourceVersion || seen.Annotations["other"] != "x" || !seen.Spec.Unschedulable {
				t.Errorf("the copy is not the Node's: %+v", seen)
			}
			if fmt.Sprint(c.node) != fmt.Sprint(before) {
				t.Error("CordonToLift changed the Node")
			}
		})
	}
}
