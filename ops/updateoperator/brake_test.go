package updateoperator

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// A release that falls back on every host halts after --halt-after
// failures: the third node never starts it, the halt is said (an Event on
// the node whose failure halted it, the gauge, `status`), and an admin's
// resume (`slipway update-operator resume`) lets the rollout go on with
// the hosts fixed; every node ends at v2. The pause between nodes counts
// from a failure as from a success.
func TestBadReleaseHaltsTheRollout(t *testing.T) {
	f := newFleetOn(t, env, "brake")
	for i := range 3 {
		f.addNode(fmt.Sprintf("brake-%d", i), true)
	}
	for _, n := range f.nodes {
		f.br[n].FallBack(100) // v2 never comes up
	}
	metrics := freeLoopback(t)
	stop := f.controller(func(o *ControllerOptions) {
		o.Policy.HaltAfter = 2
		o.Policy.PauseBetween = 2 * time.Second
		o.MetricsAddr = metrics
	})
	defer stop()
	reboots := func() (total int, per []int) {
		for _, n := range f.nodes {
			per = append(per, f.br[n].Reboots())
			total += f.br[n].Reboots()
		}
		return total, per
	}
	eventually(t, 2*time.Minute, "two failed updates, then the halt said", func() (bool, string) {
		var halted bool
		for _, n := range f.nodes {
			halted = halted || has(f.eventReasons(n), ReasonHalted)
		}
		total, per := reboots()
		return halted && total == 2, fmt.Sprintf("halt said %v, reboots %v", halted, per)
	})
	eventually(t, 10*time.Second, "the halted gauge", metricsSay(metrics, `slipway_update_operator_rollout_halted{version="v2"} 1`))
	// Well past the pause and every backoff: no node starts v2 again.
	time.Sleep(8 * time.Second)
	if total, per := reboots(); total != 2 {
		t.Fatalf("the halted release went on: reboots %v, want 2 in all", per)
	}
	for _, n := range f.nodes {
		if w := f.node(n).Annotations[f.keys.Wanted()]; w == string(IntentPrepare) || w == string(IntentPerform) || w == string(IntentReboot) {
			t.Errorf("node %s started the halted release: wanted %s", n, w)
		}
	}
	var out bytes.Buffer
	if err := Status(context.Background(), StatusOptions{Config: f.env.Config, Prefix: f.prefix, Namespace: "default", Out: &out}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "HALTED: rollout of v2 halted") {
		t.Errorf("status does not say the rollout is halted:\n%s", out.String())
	}
	// Fixed hosts, and an admin resumes: every node ends at v2.
	for _, n := range f.nodes {
		f.br[n].FallBack(0)
	}
	if err := Resume(context.Background(), f.kube, "default", f.prefix); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "every node at v2 after the resume", func() (bool, string) { return f.done() })
	// The resume is said on a node whose failure halted it, in the
	// background after the write it tells of.
	eventually(t, time.Minute, "a "+ReasonResumed+" Event", func() (bool, string) {
		var reasons []string
		for _, n := range f.nodes {
			reasons = append(reasons, f.eventReasons(n)...)
		}
		return has(reasons, ReasonResumed), fmt.Sprintf("Events: %v", reasons)
	})
}
