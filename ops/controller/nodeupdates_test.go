package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/protocol"
)

// nodeTransport is where node's instructions and reports are: "object"
// (its NodeUpdate: the spec and the status speak protocol 2, and its Node
// holds no view and no report), "node" (its Node holds its view and its
// report, its NodeUpdate neither), or what it is between the two.
func (f *fleet) nodeTransport(t *testing.T, node string) string {
	t.Helper()
	ctx := context.Background()
	n, err := f.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u, err := f.Ops.OpsV1().NodeUpdates(f.NS).Get(ctx, protocol.NodeUpdateName(node), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		u = &v1.NodeUpdate{}
	} else if err != nil {
		t.Fatal(err)
	}
	onNode := 0
	for k := range n.Annotations {
		if strings.HasPrefix(k, protocol.AnnotationChannelViewPrefix) || k == protocol.AnnotationSlotReport {
			onNode++
		}
	}
	switch {
	case u.Spec.Protocol == protocol.NodeUpdateProtocol && u.Status.Protocol == protocol.NodeUpdateProtocol && onNode == 0 && len(u.Spec.Channels) > 0:
		return "object"
	case u.Spec.Protocol == 0 && u.Status.Protocol == 0 && len(u.Spec.Channels) == 0 && onNode == 2:
		return "node"
	}
	return fmt.Sprintf("between (spec protocol %d with %d views, status protocol %d; %d of the Node's annotations)", u.Spec.Protocol, len(u.Spec.Channels), u.Status.Protocol, onNode)
}

// waitTransport waits until node's transport is want.
func (f *fleet) waitTransport(t *testing.T, node, want string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second) // a deadline for a stuck test, not a timing claim
	for {
		got := f.nodeTransport(t, node)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			f.DumpLogs(node)
			t.Fatalf("node %s: instructions and reports %s, want %s", node, got, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestUpgradeToNodeUpdates is the upgrade of slipway itself across the
// move of the nodes' instructions and reports into their NodeUpdates,
// versioned, not flag-day: with the new controller, nodes whose agents are
// of the previous release (agent.Options.NodeOnly) keep their views and
// reports on their Node and roll out; the others read and report in their
// NodeUpdate, and nothing of it stays on their Node. Each old agent
// replaced by a new one, one of them while a rollout is in flight, moves
// over, and the rollout completes.
func TestUpgradeToNodeUpdates(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 3, nil)
	nodes := make([]string, 3)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("%s-n%d", f.NS, i)
	}
	f.nodeOnly.Store(nodes[0], true)
	f.nodeOnly.Store(nodes[1], true)
	for _, n := range nodes {
		f.Start(n)
	}
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", Concurrency: 1, RebootDelay: fleettest.ZeroDelay(), NodeSelector: f.Selector()})
	f.WaitFor("every node at v2, old agents and new", 3*time.Minute, fleettest.Done(3))
	f.AssertAllAt("v2")
	f.waitTransport(t, nodes[2], "object")
	for _, n := range nodes[:2] {
		if got := f.nodeTransport(t, n); got != "node" {
			t.Errorf("node %s of an agent of the previous release: instructions and reports %s, want node", n, got)
		}
	}

	// The first old agent replaced while idle.
	f.nodeOnly.Store(nodes[0], false)
	f.Restart(nodes[0], nil)
	f.waitTransport(t, nodes[0], "object")

	// The second replaced with a rollout in flight.
	f.Patch(`{"spec":{"version":"v3"}}`)
	f.WaitFor("a slot of the v3 rollout", time.Minute, func(ch *v1.UpdateChannel) bool { return len(ch.Status.Updating) > 0 })
	f.nodeOnly.Store(nodes[1], false)
	f.Restart(nodes[1], nil)
	f.WaitFor("every node at v3 across the replacement", 3*time.Minute, fleettest.Done(3))
	f.AssertAllAt("v3")
	for _, n := range nodes {
		f.waitTransport(t, n, "object")
	}
}
