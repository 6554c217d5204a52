package monitor

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"

	edsv1alpha1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	edsversioned "slipway.dev/slipway/ops/generated/eds/clientset/versioned"
	"slipway.dev/slipway/ops/testenv"
)

func TestEDSMaxUnavailableRule(t *testing.T) {
	now := time.Unix(1000, 0)
	two := intstr.FromInt32(2)
	half := intstr.FromString("50%")
	covered := map[string]bool{"n1": true, "n2": true, "n3": true, "n4": true}
	nodes := map[string]NodeObs{"n1": {Name: "n1", Ready: true}, "n2": {Name: "n2", Ready: true}, "n3": {Name: "n3", Ready: true}, "n4": {Name: "n4", Ready: true}}
	pod := func(node string, ready bool) PodObs {
		return PodObs{Namespace: "ns", Name: "p-" + node, Node: node, EDS: "agent", Ready: ready}
	}
	withNode := func(name string, n NodeObs) map[string]NodeObs {
		out := map[string]NodeObs{}
		for k, v := range nodes {
			out[k] = v
		}
		out[name] = n
		return out
	}
	for _, tc := range []struct {
		name  string
		max   *intstr.IntOrString
		nodes map[string]NodeObs
		pods  []PodObs
		want  bool
	}{
		{"every node Ready", nil, nodes, []PodObs{pod("n1", true), pod("n2", true), pod("n3", true), pod("n4", true)}, false},
		{"one replaced at the default 1", nil, nodes, []PodObs{pod("n1", true), pod("n2", true), pod("n3", true)}, false},
		{"two down at the default 1", nil, nodes, []PodObs{pod("n1", true), pod("n2", false), pod("n3", true)}, true},
		{"two down at 2", &two, nodes, []PodObs{pod("n1", true), pod("n3", true)}, false},
		{"three down at 50% of 4", &half, nodes, []PodObs{pod("n1", true)}, true},
		{"a terminating pod is not Ready", nil, nodes, []PodObs{pod("n1", true), pod("n2", true),
			func() PodObs { p := pod("n3", true); p.Terminating = true; return p }()}, true},
		{"a NotReady node is the fault's", nil, withNode("n2", NodeObs{Name: "n2"}), []PodObs{pod("n1", true), pod("n3", true)}, false},
		{"a node Ready again within the grace", nil, withNode("n2", NodeObs{Name: "n2", Ready: true, ReadySince: now.Add(-time.Second)}),
			[]PodObs{pod("n1", true), pod("n3", true)}, false},
		{"a node Ready again past the grace", nil, withNode("n2", NodeObs{Name: "n2", Ready: true, ReadySince: now.Add(-time.Minute)}),
			[]PodObs{pod("n1", true), pod("n3", true)}, true},
		{"a deleted node is not covered", nil, map[string]NodeObs{"n1": nodes["n1"], "n3": nodes["n3"], "n4": nodes["n4"]},
			[]PodObs{pod("n1", true), pod("n3", true)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eds := map[string]EDSObs{"ns/agent": {Namespace: "ns", Name: "agent", MaxUnavailable: tc.max, Covered: covered}}
			fs, err := EDSMaxUnavailable(State{Now: now, Nodes: tc.nodes, Pods: tc.pods, EDS: eds}, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if got := len(fs) > 0; got != tc.want {
				t.Errorf("violation %t, want %t: %+v", got, tc.want, fs)
			}
		})
	}
}

// TestPlantedEDSBeyondMaxUnavailable: an ExtendedDaemonSet of
// maxUnavailable 1 over three nodes, a Ready pod on each; one pod deleted
// reports nothing; a second node's pod made not Ready is reported, with
// the ExtendedDaemonSet's and the nodes' history.
func TestPlantedEDSBeyondMaxUnavailable(t *testing.T) {
	w := newWorld(t, Config{Limits: Limits{NodeGrace: time.Millisecond}})
	ec, err := edsversioned.NewForConfig(rest.CopyConfig(testenv.Need(t, env).Config))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"avail-1", "avail-2", "avail-3"} {
		w.node(n, nil)
	}
	one := intstr.FromInt32(1)
	labels := map[string]string{"app": "avail"}
	e := &edsv1alpha1.ExtendedDaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "avail"},
		Spec: edsv1alpha1.ExtendedDaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "agent:1"}}}},
			Strategy: edsv1alpha1.ExtendedDaemonSetSpecStrategy{RollingUpdate: edsv1alpha1.ExtendedDaemonSetSpecStrategyRollingUpdate{MaxUnavailable: &one}}}}
	if _, err := ec.EdsV1alpha1().ExtendedDaemonSets("default").Create(w.ctx, e, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ec.EdsV1alpha1().ExtendedDaemonSets("default").Delete(context.Background(), "avail", metav1.DeleteOptions{})
	})
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "default"}}
	if _, err := w.c.CoreV1().ServiceAccounts("default").Create(w.ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	zero := int64(0)
	setReady := func(name string, ready bool) {
		t.Helper()
		p, err := w.c.CoreV1().Pods("default").Get(w.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
		if _, err := w.c.CoreV1().Pods("default").UpdateStatus(w.ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"avail-1", "avail-2", "avail-3"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "pod-" + n,
			Labels: map[string]string{"app": "avail", edsv1alpha1.LabelName: "avail", edsv1alpha1.LabelReplicaSet: "avail-v1"}},
			Spec: corev1.PodSpec{NodeName: n, Containers: []corev1.Container{{Name: "agent", Image: "agent:1"}}}}
		if _, err := w.c.CoreV1().Pods("default").Create(w.ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = w.c.CoreV1().Pods("default").Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		})
		setReady(p.Name, true)
	}
	time.Sleep(500 * time.Millisecond)
	w.m.Tick()
	w.quiet("a Ready pod on every node")
	if err := w.c.CoreV1().Pods("default").Delete(w.ctx, "pod-avail-1", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	w.m.Tick()
	w.quiet("one pod replaced, maxUnavailable 1")
	setReady("pod-avail-2", false)
	v := w.expect(InvEDSMaxUnavailable)
	if !strings.Contains(v.Message, "2 of its 3 nodes without a Ready pod, maxUnavailable 1: avail-1, avail-2") {
		t.Errorf("message: %s", v.Message)
	}
	if len(v.History["ExtendedDaemonSet/default/avail"]) == 0 || len(v.History["Node//avail-2"]) == 0 {
		t.Errorf("history lacks the ExtendedDaemonSet or the node: %v", v.History)
	}
}
