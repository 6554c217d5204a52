package controller

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/protocol"
)

// nodeAndObject are node's Node and NodeUpdate (an empty one when there is none).
func (f *fleet) nodeAndObject(t *testing.T, node string) (*corev1.Node, *v1.NodeUpdate) {
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
	return n, u
}

// nodeTransport is where node's instructions and reports are: "object"
// (its NodeUpdate: the spec and the status speak protocol 2 or later, and its Node
// holds no view and no report), "node" (its Node holds its view and its
// report, its NodeUpdate neither), or what it is between the two.
func (f *fleet) nodeTransport(t *testing.T, node string) string {
	t.Helper()
	n, u := f.nodeAndObject(t, node)
	onNode := 0
	for k := range n.Annotations {
		if strings.HasPrefix(k, protocol.AnnotationChannelViewPrefix) || k == protocol.AnnotationSlotReport {
			onNode++
		}
	}
	switch {
	case u.Spec.Protocol >= protocol.NodeUpdateProtocol && u.Status.Protocol >= protocol.NodeUpdateProtocol && onNode == 0 && len(u.Spec.Channels) > 0:
		return "object"
	case u.Spec.Protocol == 0 && u.Status.Protocol == 0 && len(u.Spec.Channels) == 0 && onNode == 2:
		return "node"
	}
	return fmt.Sprintf("between (spec protocol %d with %d views, status protocol %d; %d of the Node's annotations)", u.Spec.Protocol, len(u.Spec.Channels), u.Status.Protocol, onNode)
}

// waitTransport waits until node's transport is want.
func (f *fleet) waitTransport(t *testing.T, node, want string) {
	t.Helper()
	f.waitWhere(t, node, "instructions and reports", want, f.nodeTransport)
}

// waitWhere waits until where(node) is want (what says what is where).
func (f *fleet) waitWhere(t *testing.T, node, what, want string, where func(*testing.T, string) string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second) // a deadline for a stuck test, not a timing claim
	for {
		got := where(t, node)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			f.DumpLogs(node)
			t.Fatalf("node %s: %s %s, want %s", node, what, got, want)
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

// movedKeys are the Node annotations and labels that an agent of protocol
// 3 keeps in its NodeUpdate's status alone once its controller reads them
// there: what a Node carries of slipway's besides the version labels
// while an agent of protocol 2, or a controller of protocol 2, needs them.
var movedKeys = []string{protocol.AnnotationRootfsVersion, protocol.AnnotationKernelVersion, protocol.AnnotationK3sVersion,
	protocol.AnnotationBootedBootID, protocol.AnnotationStagedRootfsVersion, protocol.AnnotationStagedKernelVersion,
	protocol.AnnotationStagedK3sVersion}

// slipwayKeys are the keys of slipway's labels and annotations on node.
func (f *fleet) slipwayKeys(t *testing.T, node string) (labels, annotations []string) {
	t.Helper()
	n, err := f.Kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ours := func(k string) bool { return strings.Contains(k, "slipway.dev/") }
	for k := range n.Labels {
		if ours(k) {
			labels = append(labels, k)
		}
	}
	for k := range n.Annotations {
		if ours(k) {
			annotations = append(annotations, k)
		}
	}
	slices.Sort(labels)
	slices.Sort(annotations)
	return labels, annotations
}

// versionsWhere is where node's versions are: "status" (its NodeUpdate's
// spec and status speak protocol 3, its Node carries the version labels
// and none of the moved annotations, and the status's booted versions are
// those of its labels, recorded in the boot the node runs), "node" (its
// Node carries the version annotations and the boot ID, in its NodeUpdate
// protocol 2 at most), or what it is between the two.
func (f *fleet) versionsWhere(t *testing.T, node string) string {
	t.Helper()
	n, u := f.nodeAndObject(t, node)
	moved := 0
	for _, k := range movedKeys {
		if _, ok := n.Annotations[k]; ok {
			moved++
		}
	}
	_, staged := n.Labels[protocol.LabelStagedRootfsVersion]
	boot, _ := os.ReadFile(f.BootFile(node))
	b := u.Status.Booted
	switch {
	case u.Spec.Protocol == protocol.VersionsProtocol && u.Status.Protocol == protocol.VersionsProtocol && moved == 0 && !staged &&
		b != nil && b.Rootfs == n.Labels[protocol.LabelRootfsVersion] && b.BootID == string(boot):
		return "status"
	case u.Spec.Protocol <= protocol.NodeUpdateProtocol && n.Annotations[protocol.AnnotationRootfsVersion] == n.Labels[protocol.LabelRootfsVersion] &&
		n.Annotations[protocol.AnnotationBootedBootID] == string(boot):
		return "node"
	}
	return fmt.Sprintf("between (spec protocol %d, status protocol %d, booted %+v; %d of the moved annotations on the Node, staged label %t)",
		u.Spec.Protocol, u.Status.Protocol, b, moved, staged)
}

// waitVersions waits until node's versions are where want says (versionsWhere).
func (f *fleet) waitVersions(t *testing.T, node, want string) {
	t.Helper()
	f.waitWhere(t, node, "versions", want, f.versionsWhere)
}

// TestVersionsMoveToNodeUpdates is the upgrade of slipway itself across
// the move of the nodes' versions, boot IDs and staged versions off their
// Nodes, versioned, not flag-day: agents of protocols 2 and 3 side by side,
// under a controller of protocol 2 and then of protocol 3. Under the older
// controller every Node keeps what it reads there. Under the new one, the
// agent of protocol 3 keeps its versions in its NodeUpdate's status alone,
// its Node carrying slipway's version labels and nothing else at rest,
// through a rollout; the agent of protocol 2 keeps them on its Node, and
// once replaced by one of protocol 3 moves over.
func TestVersionsMoveToNodeUpdates(t *testing.T) {
	t.Parallel()
	var speaks atomic.Int32
	speaks.Store(protocol.NodeUpdateProtocol)
	f := newFleet(t, 2, func(o *Options) { o.Protocol = int(speaks.Load()) })
	old, cur := f.NS+"-n0", f.NS+"-n1"
	f.protocol.Store(old, protocol.NodeUpdateProtocol)
	f.Start(old)
	f.Start(cur)
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", Concurrency: 1, RebootDelay: fleettest.ZeroDelay(), NodeSelector: f.Selector()})
	f.WaitFor("every node at v2 under a controller of protocol 2", 3*time.Minute, fleettest.Done(2))
	f.AssertAllAt("v2")
	for _, n := range []string{old, cur} {
		f.waitVersions(t, n, "node") // what the older controller reads stays on every Node
		f.waitTransport(t, n, "object")
	}
	if u, err := f.Ops.OpsV1().NodeUpdates(f.NS).Get(context.Background(), protocol.NodeUpdateName(cur), metav1.GetOptions{}); err != nil || u.Status.Protocol != protocol.VersionsProtocol {
		t.Fatalf("the agent of protocol 3 did not announce it under the older controller: %v, %+v", err, u)
	}

	// The controller upgraded: the agent of protocol 3 moves its versions
	// off its Node; the one of protocol 2 keeps them there. The agents are
	// idle by then, their Node watches closed (WorkWatchLinger, 1 s here):
	// the new spec.protocol alone must open them again.
	time.Sleep(3 * time.Second)
	f.StopController()
	speaks.Store(protocol.VersionsProtocol)
	f.StartController()
	f.waitVersions(t, cur, "status")
	f.Patch(`{"spec":{"version":"v3"}}`)
	f.WaitFor("every node at v3 under a controller of protocol 3", 3*time.Minute, func(ch *v1.UpdateChannel) bool {
		return ch.Status.ObservedGeneration == ch.Generation && fleettest.Done(2)(ch)
	})
	f.AssertAllAt("v3")
	f.waitVersions(t, cur, "status")
	f.waitVersions(t, old, "node")
	labels, annotations := f.slipwayKeys(t, cur)
	if want := []string{protocol.LabelKernelVersion, protocol.LabelRootfsVersion}; !slices.Equal(labels, want) || len(annotations) > 0 {
		t.Errorf("node %s at rest carries labels %v and annotations %v of slipway's, want the labels %v alone", cur, labels, annotations, want)
	}

	// The agent of protocol 2 replaced.
	f.protocol.Delete(old)
	f.Restart(old, nil)
	f.waitVersions(t, old, "status")
}
