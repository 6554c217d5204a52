package updateoperator

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// events returns the reasons of the Events about node.
func (f *fleet) eventReasons(node string) []string {
	list, err := f.kube.CoreV1().Events(eventNamespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", node).String()})
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Reason)
	}
	return out
}

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// A malformed intent and a host API socket that went away: each gives a
// clear error, the node's state error with a reason, and an Event; the
// malformed intent is written over by the controller, and the rollout goes
// on with the other nodes.
func TestBadInputLeavesTheRestRolling(t *testing.T) {
	f := newFleet(t, "bad", 3)
	garbled, deadSocket, fine := f.nodes[0], f.nodes[1], f.nodes[2]
	f.br[deadSocket].Close()
	f.patch(garbled, map[string]any{"metadata": map[string]any{"annotations": map[string]any{f.keys.Wanted(): "explode-now"}}})
	eventually(t, 30*time.Second, "the agent reports the bad intent", func() (bool, string) {
		g := f.keys.View(f.node(garbled), "")
		return g.State == StateError, fmt.Sprintf("garbled state %s", g.State)
	})
	if r := f.node(garbled).Annotations[f.keys.Key(KeyReason)]; !strings.Contains(r, "explode-now") {
		t.Errorf("the garbled node's reason %q does not name the bad value", r)
	}
	stop := f.controller(nil)
	defer stop()
	eventually(t, 30*time.Second, "the agent reports the dead socket", func() (bool, string) {
		d := f.node(deadSocket)
		reason := d.Annotations[f.keys.Key(KeyReason)]
		return d.Annotations[f.keys.State()] == string(StateError) && strings.Contains(reason, "--api-socket"),
			fmt.Sprintf("state %s reason %q", d.Annotations[f.keys.State()], reason)
	})
	eventually(t, 2*time.Minute, "the other nodes updated", func() (bool, string) {
		for _, name := range []string{garbled, fine} {
			v := f.keys.View(f.node(name), "")
			if got := f.version(name); got != "v2" || v.Wanted != IntentStabilize || v.State != StateUpToDate {
				return false, fmt.Sprintf("%s: %s %s %s", name, got, v.Wanted, v.State)
			}
		}
		return true, ""
	})
	if v := f.keys.View(f.node(deadSocket), ""); v.State != StateError || v.Wanted != IntentStabilize || v.CordonedByUs {
		t.Errorf("the dead-socket node: %+v; want it resting in error, untouched", v)
	}
	for _, name := range []string{garbled, deadSocket} {
		if r := f.eventReasons(name); !has(r, ReasonAgentError) {
			t.Errorf("no %s Event about %s (got %v)", ReasonAgentError, name, r)
		}
	}
}
