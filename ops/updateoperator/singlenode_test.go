package updateoperator

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/testenv"
)

// A one-node cluster of its own: the controller runs on the node it
// updates, is stopped when the node goes down (as its pod would be) and
// started again once the node is back. The node ends updated and
// schedulable, and the Deployment drained off it is back to ready.
func TestSingleNodeClusterEndsSchedulable(t *testing.T) {
	testenv.Need(t, env)
	if testing.Short() {
		t.Skip("starts a control plane of its own")
	}
	e, err := testenv.Start(context.Background(), testenv.Options{Cluster: true, Nodes: 1, NodePrefix: "solo-", ToolsDir: os.Getenv(testenv.EnvToolsDir)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	f := newFleetOn(t, e, "solo")
	node := e.Nodes[0]
	f.nodes = append(f.nodes, node)
	f.adopt(node, false)
	f.guarded(t, "default", "solo-web", 2, 0)
	edit := func(o *ControllerOptions) { o.NodeName = node }
	stop := f.controller(edit)
	eventually(t, time.Minute, "the node goes down for its reboot", func() (bool, string) {
		f.mu.Lock()
		rebooted := f.reboots[node] > 0
		f.mu.Unlock()
		return rebooted || !nodeReady(f.node(node)), "still up"
	})
	stop() // evicted with its node
	eventually(t, time.Minute, "the node is back", func() (bool, string) { return nodeReady(f.node(node)), "NotReady" })
	stop = f.controller(edit)
	defer stop()
	eventually(t, 2*time.Minute, "updated and schedulable", func() (bool, string) {
		n := f.node(node)
		v := f.keys.View(n, node)
		return f.version(node) == "v2" && v.Wanted == IntentStabilize && !n.Spec.Unschedulable && !v.CordonedByUs,
			fmt.Sprintf("version %s wanted %s unschedulable %v", f.version(node), v.Wanted, n.Spec.Unschedulable)
	})
	d, err := f.kube.AppsV1().Deployments("default").Get(context.Background(), "solo-web", metav1.GetOptions{})
	if err != nil || d.Status.ReadyReplicas != 2 {
		t.Errorf("the Deployment drained off the node: %v ready, err %v; want 2 (the update finishes only once it is)", d.Status.ReadyReplicas, err)
	}
	// Events are written in the background, after the write they tell of.
	eventually(t, time.Minute, "the drain's, the uncordon's and the success's Events", func() (bool, string) {
		r := f.eventReasons(node)
		return has(r, ReasonSucceeded) && has(r, ReasonDrained) && has(r, ReasonUncordoned),
			fmt.Sprintf("Events about %s: %v; want %s, %s and %s", node, r, ReasonDrained, ReasonUncordoned, ReasonSucceeded)
	})
}
