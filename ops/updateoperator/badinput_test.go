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

// eventSaid waits (up to a minute) for an Event of reason about node, and
// tells whether one came: Events are written in the background, after the
// write they tell of.
func (f *fleet) eventSaid(node, reason string) bool {
	deadline := time.Now().Add(time.Minute)
	for !has(f.eventReasons(node), reason) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
	return true
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
// clear error, a reason and an Event; the malformed intent is held (never
// written over: the node could be mid-update), the dead socket rests in
// error, and the rollout goes on with the other nodes. Once an admin writes
// a valid intent, the held node updates too.
func TestBadInputLeavesTheRestRolling(t *testing.T) {
	f := newFleet(t, "bad", 3)
	garbled, deadSocket, fine := f.nodes[0], f.nodes[1], f.nodes[2]
	f.br[deadSocket].Close()
	f.patch(garbled, map[string]any{"metadata": map[string]any{"annotations": map[string]any{f.keys.Wanted(): "explode-now"}}})
	eventually(t, 30*time.Second, "the agent reports the bad intent", func() (bool, string) {
		r := f.node(garbled).Annotations[f.keys.Key(KeyReason)]
		return strings.Contains(r, "explode-now"), fmt.Sprintf("reason %q", r)
	})
	stop := f.controller(nil)
	defer stop()
	eventually(t, 30*time.Second, "the agent reports the dead socket", func() (bool, string) {
		d := f.node(deadSocket)
		reason := d.Annotations[f.keys.Key(KeyReason)]
		return d.Annotations[f.keys.State()] == string(StateError) && strings.Contains(reason, "--api-socket"),
			fmt.Sprintf("state %s reason %q", d.Annotations[f.keys.State()], reason)
	})
	eventually(t, 2*time.Minute, "the fine node updated", func() (bool, string) {
		v := f.keys.View(f.node(fine), "")
		got := f.version(fine)
		return got == "v2" && v.Wanted == IntentStabilize && v.State == StateUpToDate, fmt.Sprintf("%s %s %s", got, v.Wanted, v.State)
	})
	if w := f.node(garbled).Annotations[f.keys.Wanted()]; w != "explode-now" {
		t.Errorf("the garbled intent was written over with %q; want it held for an admin", w)
	}
	if v := f.keys.View(f.node(deadSocket), ""); v.State != StateError || v.Wanted != IntentStabilize || v.CordonedByUs {
		t.Errorf("the dead-socket node: %+v; want it resting in error, untouched", v)
	}
	for _, name := range []string{garbled, deadSocket} {
		if !f.eventSaid(name, ReasonAgentError) {
			t.Errorf("no %s Event about %s (got %v)", ReasonAgentError, name, f.eventReasons(name))
		}
	}
	f.patch(garbled, map[string]any{"metadata": map[string]any{"annotations": map[string]any{f.keys.Wanted(): string(IntentStabilize)}}})
	eventually(t, 2*time.Minute, "the held node updated once its intent was fixed", func() (bool, string) {
		v := f.keys.View(f.node(garbled), "")
		got := f.version(garbled)
		return got == "v2" && v.Wanted == IntentStabilize && v.State == StateUpToDate, fmt.Sprintf("%s %s %s", got, v.Wanted, v.State)
	})
	if r := f.node(garbled).Annotations[f.keys.Key(KeyReason)]; r != "" {
		t.Errorf("reason %q left on the held node after its update", r)
	}
}

// A garbled action-state on a node told reboot-update never reboots it:
// whether it rebooted already cannot be told (it may be back and serving,
// undrained); the agent holds it with a reason and an Event.
func TestGarbledStateNeverReboots(t *testing.T) {
	f := newFleet(t, "garbled", 1)
	name := f.nodes[0]
	f.stopAgent(name)
	f.patch(name, map[string]any{"metadata": map[string]any{"annotations": map[string]any{f.keys.Wanted(): string(IntentReboot),
		f.keys.Active(): string(IntentReboot), f.keys.State(): "rebooted-probably"}}})
	f.startAgent(name)
	eventually(t, 30*time.Second, "the agent holds the node", func() (bool, string) {
		r := f.node(name).Annotations[f.keys.Key(KeyReason)]
		return strings.Contains(r, "rebooted-probably") && has(f.eventReasons(name), ReasonAgentError), fmt.Sprintf("reason %q", r)
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reboots[name] != 0 || f.down[name] {
		t.Errorf("the agent rebooted a node whose state it could not read (%d reboots)", f.reboots[name])
	}
}

// A hold's reason goes when the hold ends, even on a node with nothing to
// do next (excluded here): the reason says why a node waits, and it no
// longer does.
func TestHeldReasonGoesWithTheHold(t *testing.T) {
	f := newFleet(t, "heldgone", 1)
	name := f.nodes[0]
	f.patch(name, map[string]any{"metadata": map[string]any{
		"labels":      map[string]any{f.keys.Exclude(): "true"},
		"annotations": map[string]any{f.keys.Key(KeyFailures): "-1"}}})
	stop := f.controller(nil)
	defer stop()
	eventually(t, 30*time.Second, "the node held with a reason", func() (bool, string) {
		r := f.node(name).Annotations[f.keys.Key(KeyReason)]
		return strings.HasPrefix(r, HeldPrefix) && strings.Contains(r, "failures"), fmt.Sprintf("reason %q", r)
	})
	f.patch(name, map[string]any{"metadata": map[string]any{"annotations": map[string]any{f.keys.Key(KeyFailures): nil}}})
	eventually(t, 30*time.Second, "the hold's reason gone", func() (bool, string) {
		r := f.node(name).Annotations[f.keys.Key(KeyReason)]
		return r == "", fmt.Sprintf("reason %q", r)
	})
}
