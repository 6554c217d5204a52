package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/testenv"
	uo "slipway.dev/slipway/ops/updateoperator"
)

// TestDemo is the demo's act (scripts/demo-update-operator): the fake
// nodes' agents report v1, release v2 is published, and the controller
// rolls it through two nodes at a time while the status table is printed.
func TestDemo(t *testing.T) {
	e := testenv.Need(t, env)
	if env == nil || os.Getenv("SLIPWAY_UO_DEMO") != "1" {
		t.Skip("the demo runs with SLIPWAY_UO_DEMO=1 (scripts/demo-update-operator)")
	}
	c, err := kube.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("== every node's agent reports its host (v1) ==")
	stop, _ := startController(t, e, roundSpec{conc: 2}, "demo")
	waitAll(t, c, 2*time.Minute, "up to date", func(n *corev1.Node) bool { return n.Annotations[keys.State()] == string(uo.StateUpToDate) })
	show(e)
	fmt.Println("== release v2 is published; the controller rolls it 2 nodes at a time (cordon, drain, reboot, uncordon) ==")
	if err := setRelease("v2"); err != nil {
		t.Fatal(err)
	}
	last := ""
	waitAll(t, c, 10*time.Minute, "every node at v2", func(n *corev1.Node) bool {
		return n.Annotations[keys.Key(uo.KeyCurrentVersion)] == "v2" && n.Annotations[keys.Wanted()] == string(uo.IntentStabilize) &&
			n.Annotations[keys.State()] == string(uo.StateUpToDate) && !n.Spec.Unschedulable
	}, func([]corev1.Node) {
		if s := table(e); s != last {
			fmt.Printf("-- %s\n%s", time.Now().Format("15:04:05.0"), s)
			last = s
		}
	})
	stop()
	fmt.Println("== done: every node at v2, schedulable ==")
	show(e)
}

func table(e *testenv.Env) string {
	var out bytes.Buffer
	if err := uo.Status(context.Background(), uo.StatusOptions{Config: e.Config, Out: &out}); err != nil {
		return err.Error() + "\n"
	}
	var keep []string
	for _, l := range strings.Split(out.String(), "\n") {
		if l != "" && !strings.Contains(l, "TRANSITION") && !strings.HasPrefix(l, "node-") {
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "\n")
}

func show(e *testenv.Env) { fmt.Print(table(e)) }
