package eds

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	edscli "slipway.dev/slipway/ops/eds/cli"
)

// TestDemo is the act scripts/demo-eds shows (SLIPWAY_EDS_DEMO=1): a
// daemon on every node, a new version through a canary validated with
// kubectl-eds, then a broken version whose canary crashes, pauses, fails and
// is rolled back by itself. Every step prints what kubectl-eds shows.
func TestDemo(t *testing.T) {
	if os.Getenv("SLIPWAY_EDS_DEMO") != "1" {
		t.Skip("the demo act: SLIPWAY_EDS_DEMO=1 (scripts/demo-eds)")
	}
	h := newHarness(t)
	ctx := context.Background()
	cl, out := h.kubectlEDS("")
	show := func(title string, cmd string, run func() error) {
		t.Helper()
		out.Reset()
		if err := run(); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("\n== %s\n$ kubectl eds %s\n%s", title, cmd, out.String())
	}
	get := func() error { return cl.Get(ctx, "") }
	pods := func() error { return cl.Pods(ctx, "agent", edscli.SelectAll) }

	h.create(manual(daemon("agent", "agent:v1")))
	h.rolledOut("agent", "agent:v1", clusterNodes)
	show("agent:v1 runs on every node", "get", get)
	show("its pods, one per node", "pods agent", pods)

	h.setImage("agent", "agent:v2")
	h.waitState("agent", v1.StateCanary, 20*time.Second)
	h.canaryPod("agent", h.get("agent").Status.Canary.ReplicaSet)
	show("agent:v2 applied: it runs on one canary node only", "get", get)
	show("what the canary changes", "diff agent", func() error { return cl.Diff(ctx, "agent") })
	show("a manual canary waits for a person", "canary validate agent", func() error { return cl.CanaryValidate(ctx, "agent") })
	h.rolledOut("agent", "agent:v2", clusterNodes)
	show("validated: rolled out under maxUnavailable", "get-ers agent", func() error { return cl.GetERS(ctx, "agent") })

	h.setImage("agent", "agent:v3-broken")
	e := h.waitState("agent", v1.StateCanary, 20*time.Second)
	p := h.canaryPod("agent", e.Status.Canary.ReplicaSet)
	h.crash(p.Name, 3)
	h.waitState("agent", v1.StateCanaryPaused, 10*time.Second)
	show("agent:v3-broken crash-loops on its canary node (3 restarts): paused by itself", "canary pods agent",
		func() error { return cl.Pods(ctx, "agent", edscli.SelectCanary) })
	h.crash(p.Name, 6)
	h.waitState("agent", v1.StateCanaryFailed, 10*time.Second)
	h.rolledOutState("agent", "agent:v2", clusterNodes, v1.StateCanaryFailed)
	show("6 restarts: failed; agent:v2 restored in the spec and on the canary node", "get", get)
	show("every node still runs agent:v2", "pods agent", pods)
	evs := h.events("agent")
	var reasons []string
	for r, n := range evs {
		reasons = append(reasons, fmt.Sprintf("%s×%d", r, n))
	}
	fmt.Printf("\n== Events recorded on the ExtendedDaemonSet: %s\n", strings.Join(reasons, ", "))
}
