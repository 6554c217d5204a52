package agent

import (
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// TestWindowTooShortForTheDrain: a node whose slot was claimed while the
// window had room, but whose drain would outlast the window now, gives
// its slot back without a failure, uncordoned and not rebooted, its swap
// rolled back; and no slot is claimed again in that opening.
func TestWindowTooShortForTheDrain(t *testing.T) {
	t.Parallel()
	windowTooShortForTheDrain(t, nil)
}

// TestWindowTooShortForTheDrainNoStaging is the same deferral with staging
// ahead off (prestage.concurrency 0): no staging permit rewrites the
// node's view after the node gave its slot back, so only the slot's end
// itself may let the swap be rolled back.
func TestWindowTooShortForTheDrainNoStaging(t *testing.T) {
	t.Parallel()
	zero := 0
	windowTooShortForTheDrain(t, &v1.PrestageSpec{Concurrency: &zero})
}

func windowTooShortForTheDrain(t *testing.T, prestage *v1.PrestageSpec) {
	f := newFleet(t, 2, nil)
	leader, node := f.NS+"-n0", f.NS+"-n1"
	if err := f.PatchNodeLabel(node, "pick", "yes"); err != nil {
		t.Fatal(err)
	}
	f.Start(leader)
	f.Start(node)
	f.WaitNode(t, node, "labelled v1", func(n *corev1.Node) bool { return n.Labels[protocol.LabelRootfsVersion] == "v1" })
	f.AgentsUp(node) // its heartbeat written: a node whose agent never reported takes no slot
	f.Stop(node)     // its slot is claimed while its agent is away
	now := time.Now().UTC()
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(),
		Window:       &v1.Window{Start: now.Add(-time.Minute).Format("15:04"), End: now.Add(3 * time.Minute).Format("15:04"), TimeZone: "UTC"},
		Drain:        &v1.DrainSpec{Timeout: &metav1.Duration{Duration: 5 * time.Second}},
		Prestage:     prestage,
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS, "pick": "yes"}}})
	f.WaitFor("the slot claimed", 30*time.Second, func(ch *v1.UpdateChannel) bool { return plan.FindSlot(ch.Status, node) >= 0 })
	f.Patch(`{"spec":{"drain":{"timeout":"30m"}}}`) // now the window cannot hold the drain
	f.Start(node)
	f.WaitFor("the slot given back", 30*time.Second, func(ch *v1.UpdateChannel) bool { return plan.FindSlot(ch.Status, node) < 0 })
	if n := f.EventsWithin("WaitingForWindow", 1, 10*time.Second); n != 1 {
		t.Errorf("%d WaitingForWindow events, want 1", n)
	}
	f.WaitNode(t, node, "uncordoned, v1 running and current", func(n *corev1.Node) bool {
		return !n.Spec.Unschedulable && n.Labels[protocol.LabelRootfsVersion] == "v1" && f.Current(node) == "v1"
	})
	f.Holds("no new slot, no failure in this opening", 5*time.Second, func(ch *v1.UpdateChannel) bool {
		return len(ch.Status.Updating) == 0 && len(ch.Status.Failed) == 0
	})
	if b, _ := os.ReadFile(f.BootFile(node)); string(b) != "boot-0" {
		t.Errorf("the node rebooted (boot %q) though the window had no room", b)
	}
}
