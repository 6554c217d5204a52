package agent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/fleettest"
)

// doneSince is fleettest.Done(n) for the spec of generation gen or later: a status
// computed for an earlier spec does not count.
func doneSince(n int, gen int64) func(*v1.UpdateChannel) bool {
	return func(ch *v1.UpdateChannel) bool {
		return ch.Status.ObservedGeneration >= gen && fleettest.Done(n)(ch)
	}
}

// TestBackAndForthRollouts: v1 -> v2 -> v1 -> v2. Each rollout runs Jobs of
// its own: the second v2 must not take the first v2's Complete Jobs for its
// own, reboot without a swap and report "the boot fell back".
func TestBackAndForthRollouts(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 2, nil)
	for i := range 2 {
		f.Start(fmt.Sprintf("%s-n%d", f.NS, i))
	}
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", Concurrency: 2, RebootDelay: fleettest.ZeroDelay(),
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS}}})
	f.WaitFor("all at v2", time.Minute, fleettest.Done(2))
	f.AssertAllAt("v2")
	for _, version := range []string{"v1", "v2"} {
		f.Patch(fmt.Sprintf(`{"spec":{"version":%q}}`, version))
		gen := f.Get().Generation
		ch := f.WaitFor("all at "+version, time.Minute, func(ch *v1.UpdateChannel) bool {
			return doneSince(2, gen)(ch) || len(ch.Status.Failed) > 0
		})
		if len(ch.Status.Failed) > 0 {
			t.Fatalf("rollout to %s failed: %+v", version, ch.Status.Failed)
		}
		f.AssertAllAt(version)
	}
	if n := f.EventsWithin("UpgradeFailed", 1, time.Second); n > 0 {
		t.Errorf("%d UpgradeFailed events going back and forth", n)
	}
	slots, _, _ := f.JobsByAction() // the slots' Pods, not the staging Jobs ahead of them
	var names []string
	for _, jobs := range slots {
		for _, j := range jobs {
			names = append(names, j.Name)
		}
	}
	if len(names) != 6 { // 2 nodes x 3 rollouts, one Pod each
		t.Errorf("want 6 upgrade Pods, one per node and rollout, got %d: %s", len(names), strings.Join(names, " "))
	}
}
