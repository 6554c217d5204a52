package controller

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/protocol"
)

// TestControllerKilledMidDrain (issue 22 item 2): the drain is the
// controller's, and no node stays cordoned by it whatever stops when. A
// controller stopped mid-drain leaves the cordon; the next replica to take
// the Lease finishes the drain (the node then reboots and upgrades), or,
// when the slot went meanwhile and the node's agent is gone too, uncordons
// the node.
func TestControllerKilledMidDrain(t *testing.T) {
	t.Parallel()
	spec := func(f *fleet) v1.UpdateChannelSpec {
		return v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(),
			Drain: &v1.DrainSpec{Timeout: &metav1.Duration{Duration: 2 * time.Minute}}, NodeSelector: f.Selector()}
	}
	cordoned := func(n *corev1.Node) bool {
		return n.Spec.Unschedulable && drain.CordonedBy(n.Annotations) == protocol.CordonOwner
	}
	t.Run("the next replica finishes the drain", func(t *testing.T) {
		t.Parallel()
		f := newFleet(t, 1, nil)
		node := f.NS + "-n0"
		f.BlockEviction(t, node)
		f.Start(node)
		f.Channel(spec(f))
		f.WaitNode(t, node, "cordoned by the controller's drain", cordoned)
		f.StopController()
		f.StartReplica("replica-2")
		if err := f.Kube.PolicyV1().PodDisruptionBudgets(f.NS).Delete(context.Background(), "guarded", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		f.podGoesWhenEvicted(t, "guarded")
		f.WaitFor("the node upgraded", 2*time.Minute, func(ch *v1.UpdateChannel) bool {
			return ch.Status.Counts.UpToDate == 1 && len(ch.Status.Updating) == 0
		})
		f.WaitNode(t, node, "uncordoned at v2", func(n *corev1.Node) bool {
			return !n.Spec.Unschedulable && drain.CordonedBy(n.Annotations) == "" && n.Labels[protocol.LabelRootfsVersion] == "v2"
		})
	})
	t.Run("the next replica uncordons a node whose slot went", func(t *testing.T) {
		t.Parallel()
		f := newFleet(t, 1, nil)
		node := f.NS + "-n0"
		f.BlockEviction(t, node)
		f.Start(node)
		f.Channel(spec(f))
		f.WaitNode(t, node, "cordoned by the controller's drain", cordoned)
		f.StopController()
		f.Stop(node) // no agent either: only the controller can lift its cordon
		if err := f.Ops.OpsV1().UpdateChannels(f.NS).Delete(context.Background(), "default", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		f.StartReplica("replica-2")
		f.WaitNode(t, node, "uncordoned by the next replica", func(n *corev1.Node) bool {
			return !n.Spec.Unschedulable && drain.CordonedBy(n.Annotations) == "" && n.Annotations[protocol.AnnotationDrainStarted] == ""
		})
	})
}

// TestDrainLeavesTheController (issue 22 stage 3, one-node clusters): the
// controller drains the node it runs on without evicting itself (its
// replacement could not schedule on the cordoned node: the node would stay
// cordoned with nobody to finish); the node's other pods it evicts, and the
// slot ends with the node upgraded and uncordoned.
func TestDrainLeavesTheController(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	node := f.NS + "-n0"
	ctl := f.runningPod(t, node, "slipway-controller-7d4b9-x2x9z", map[string]string{"app.kubernetes.io/name": protocol.ControllerApp})
	f.runningPod(t, node, "web-5c6f8-abcde", map[string]string{"app": "web"})
	f.Start(node)
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(),
		Drain: &v1.DrainSpec{Timeout: &metav1.Duration{Duration: 2 * time.Minute}}, NodeSelector: f.Selector()})
	kept := func() {
		p, err := f.Kube.CoreV1().Pods(f.NS).Get(context.Background(), ctl, metav1.GetOptions{})
		if err != nil || p.DeletionTimestamp != nil {
			t.Fatalf("the drain evicted the controller's own pod %s (err %v)", ctl, err)
		}
	}
	f.podGoesWhenEvicted(t, "web-5c6f8-abcde")
	kept()
	f.WaitFor("the node upgraded", 2*time.Minute, func(ch *v1.UpdateChannel) bool {
		kept()
		return ch.Status.Counts.UpToDate == 1 && len(ch.Status.Updating) == 0
	})
	f.WaitNode(t, node, "uncordoned at v2", func(n *corev1.Node) bool {
		return !n.Spec.Unschedulable && drain.CordonedBy(n.Annotations) == "" && n.Labels[protocol.LabelRootfsVersion] == "v2"
	})
	kept()
}

// runningPod creates a running pod of a ReplicaSet on node (as a kubelet
// would report it) and returns its name.
func (f *fleet) runningPod(t *testing.T, node, name string, labels map[string]string) string {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: f.NS}}
	if _, err := f.Kube.CoreV1().ServiceAccounts(f.NS).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err) // no controller-manager creates it here
	}
	yes := true
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.NS, Labels: labels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name, UID: types.UID("replicaset-of-" + name), Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/fake"}}}}
	p, err := f.Kube.CoreV1().Pods(f.NS).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	if _, err := f.Kube.CoreV1().Pods(f.NS).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = f.Kube.CoreV1().Pods(f.NS).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	return name
}

// podGoesWhenEvicted waits for pod's eviction and removes it, as its
// kubelet would once its containers stopped (no kubelet runs here).
func (f *fleet) podGoesWhenEvicted(t *testing.T, pod string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	for {
		p, err := f.Kube.CoreV1().Pods(f.NS).Get(ctx, pod, metav1.GetOptions{})
		if err == nil && p.DeletionTimestamp != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s was not evicted within a minute (err %v)", pod, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	zero := int64(0)
	if err := f.Kube.CoreV1().Pods(f.NS).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
}

// TestEachSlotDrainedOnce: the pass that marks a drained slot Rebooting
// folds that node's Draining report again; the drain it ends must not start
// once more (a second cordon check, pod list and slot confirmation for
// nothing, while the node reboots).
func TestEachSlotDrainedOnce(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 3, nil)
	nodes := []string{f.NS + "-n0", f.NS + "-n1", f.NS + "-n2"}
	for _, n := range nodes {
		f.Start(n)
	}
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", Concurrency: 3, RebootDelay: fleettest.ZeroDelay(), NodeSelector: f.Selector()})
	f.WaitFor("all nodes at v2", 2*time.Minute, fleettest.Done(3))
	f.AssertAllAt("v2")
	time.Sleep(time.Second) // a drain started again by the last marking pass would log by now
	for _, n := range nodes {
		if got := f.drainsLogged(n); got != 1 {
			t.Errorf("node %s: the controller drained it %d times for one slot, want 1", n, got)
		}
	}
}

// drainsLogged counts the drains the controller began on node (its
// "draining" log lines).
func (f *fleet) drainsLogged(node string) int {
	b, err := os.ReadFile(filepath.Join(f.Root, "agents.log"))
	if err != nil {
		f.T.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "msg=draining ") && strings.Contains(line, " node="+node+" ") {
			n++
		}
	}
	return n
}
