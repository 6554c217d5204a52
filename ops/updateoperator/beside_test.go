package updateoperator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"slipway.dev/slipway/ops/updateoperator/platform"
)

// gatedPerform holds its host's perform-update until release is closed,
// then fails it with fail (when set) as the host would report it.
type gatedPerform struct {
	platform.Platform
	release chan struct{}
	fail    error
}

func (g *gatedPerform) Perform(ctx context.Context) error {
	select {
	case <-g.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	if g.fail != nil {
		return g.fail
	}
	return g.Platform.Perform(ctx)
}

// gatePerform restarts node's agent on a host whose perform-update waits
// for the returned gate.
func (f *fleet) gatePerform(node string, fail error) *gatedPerform {
	f.stopAgent(node)
	f.mu.Lock()
	g := &gatedPerform{Platform: f.plats[node], release: make(chan struct{}), fail: fail}
	f.plats[node] = g
	f.mu.Unlock()
	f.startAgent(node)
	return g
}

// performingCordoned: the host is carrying out perform-update (the agent
// has not reported its result) and the operator's cordon is on the node
// already.
func (f *fleet) performingCordoned(node string) func() (bool, string) {
	return func() (bool, string) {
		n := f.node(node)
		v := f.keys.View(n, "")
		performed := v.Active == IntentPerform && v.State != StateBusy // the agent acknowledges perform-update with its result
		return v.Wanted == IntentPerform && !performed && v.CordonedByUs && n.Spec.Unschedulable,
			fmt.Sprintf("wanted %s active %s state %s cordoned by us %v unschedulable %v", v.Wanted, v.Active, v.State, v.CordonedByUs, n.Spec.Unschedulable)
	}
}

// The drain runs beside the host's perform-update: the node is cordoned
// while the host is still performing, and reboots once both are done.
func TestDrainRunsBesidePerform(t *testing.T) {
	f := newFleet(t, "beside", 1)
	name := f.nodes[0]
	gate := f.gatePerform(name, nil)
	f.controller(nil)
	eventually(t, time.Minute, "cordoned while the host performs", f.performingCordoned(name))
	time.Sleep(500 * time.Millisecond) // a turn or two: no reboot while the host performs
	if v := f.keys.View(f.node(name), ""); v.Wanted != IntentPerform {
		t.Fatalf("wanted %s while the host still performs: the reboot must wait for it", v.Wanted)
	}
	close(gate.release)
	eventually(t, 90*time.Second, "the node updated", f.done)
}

// perform-update is wanted in the write that cordons the node: no version
// of the Node asks its host to perform while the node still takes pods,
// and the drain starts with the intent, not a turn after it.
func TestPerformWantedInTheCordonsWrite(t *testing.T) {
	f := newFleet(t, "cordonwrite", 1)
	name := f.nodes[0]
	first := f.firstWith(name, func(n *corev1.Node) bool { return f.keys.View(n, "").Wanted == IntentPerform })
	f.controller(nil)
	eventually(t, 90*time.Second, "the node updated", f.done)
	n := first()
	if n == nil {
		t.Fatal("no version of the Node wanted perform-update")
	}
	if v := f.keys.View(n, ""); !n.Spec.Unschedulable || !v.CordonedByUs {
		t.Errorf("perform-update wanted at resource version %s with the node unschedulable %v, cordoned by us %v: the cordon rides on that write",
			n.ResourceVersion, n.Spec.Unschedulable, v.CordonedByUs)
	}
}

// firstWith watches node and returns the first version of it that match
// accepts (nil so far when none did).
func (f *fleet) firstWith(node string, match func(*corev1.Node) bool) func() *corev1.Node {
	var mu sync.Mutex
	var first *corev1.Node
	f.watchNode(node, func(n *corev1.Node) {
		mu.Lock()
		defer mu.Unlock()
		if first == nil && match(n) {
			first = n
		}
	})
	return func() *corev1.Node { mu.Lock(); defer mu.Unlock(); return first }
}

// A perform-update that fails while its drain is blocked (a budget allows
// no eviction) stops the drain: the failure is recorded with the host's
// words and the cordon lifted at once, not at the drain's timeout.
func TestFailedPerformStopsItsDrain(t *testing.T) {
	f := newFleet(t, "stopdrain", 1)
	name, ctx := f.nodes[0], context.Background()
	f.heldPod(t, "stopdrain-held", name)
	gate := f.gatePerform(name, errors.New("activate-update: the image's signature did not verify"))
	f.controller(func(o *ControllerOptions) {
		o.Drain.Timeout = 10 * time.Minute
		o.Policy.Backoff, o.Policy.BackoffMax = 10*time.Minute, 10*time.Minute // one attempt in this test
	})
	eventually(t, time.Minute, "cordoned while the host performs", f.performingCordoned(name))
	close(gate.release)
	eventually(t, 30*time.Second, "the failure recorded and the cordon lifted", func() (bool, string) {
		n := f.node(name)
		v := f.keys.View(n, "")
		reason := n.Annotations[f.keys.Key(KeyReason)]
		return v.Failures == 1 && !n.Spec.Unschedulable && !v.CordonedByUs && strings.Contains(reason, "signature did not verify"),
			fmt.Sprintf("failures %d unschedulable %v reason %q", v.Failures, n.Spec.Unschedulable, reason)
	})
	if _, err := f.kube.CoreV1().Pods("default").Get(ctx, "stopdrain-held", metav1.GetOptions{}); err != nil {
		t.Errorf("the pod the budget protects: %v", err)
	}
}

// heldPod runs a pod on node that a budget lets no eviction take.
func (f *fleet) heldPod(t *testing.T, name, node string) {
	ctx := context.Background()
	p := barePod(name, node, false)
	p.Labels = map[string]string{"held": name}
	min := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &min, Selector: &metav1.LabelSelector{MatchLabels: p.Labels}}}
	if _, err := f.kube.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.kube.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.kube.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		_ = f.kube.PolicyV1().PodDisruptionBudgets("default").Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// A controller stopped after the drain, while the host still performs,
// keeps nothing of the drain but the node's annotations: the next one
// drains again (nothing left to evict), and the node reboots once the host
// performed; the cordon is lifted when the update ends.
func TestDrainBesidePerformSurvivesARestart(t *testing.T) {
	f := newFleet(t, "besiderestart", 1)
	name := f.nodes[0]
	gate := f.gatePerform(name, nil)
	stop := f.controller(nil)
	eventually(t, time.Minute, "cordoned while the host performs", f.performingCordoned(name))
	stop()
	f.controller(nil)
	close(gate.release)
	eventually(t, 90*time.Second, "the node updated", f.done)
}
