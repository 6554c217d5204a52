package monitor

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	edsv1alpha1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	edsversioned "slipway.dev/slipway/ops/generated/eds/clientset/versioned"
	"slipway.dev/slipway/ops/testenv"
)

func TestCanaryConfinedRule(t *testing.T) {
	now := time.Unix(1000, 0)
	old := now.Add(-time.Minute)
	eds := map[string]EDSObs{"ns/agent": {Namespace: "ns", Name: "agent", Active: "agent-v1", CanaryReplicaSet: "agent-v2", CanaryNodes: []string{"n1"}}}
	pod := func(name, node, ers string, first time.Time) PodObs {
		return PodObs{Namespace: "ns", Name: name, Node: node, EDS: "agent", ReplicaSet: ers, FirstSeen: first}
	}
	for _, tc := range []struct {
		name string
		pods []PodObs
		eds  map[string]EDSObs
		want []string
	}{
		{"the active template anywhere", []PodObs{pod("a", "n2", "agent-v1", old)}, eds, nil},
		{"the canary on its node", []PodObs{pod("b", "n1", "agent-v2", old)}, eds, nil},
		{"the canary template off the canary nodes", []PodObs{pod("c", "n2", "agent-v2", old)}, eds, []string{"ns/c"}},
		{"a third template with no canary", []PodObs{pod("d", "n1", "agent-v3", old)}, eds, []string{"ns/d"}},
		{"too young to judge", []PodObs{pod("e", "n2", "agent-v2", now.Add(-time.Second))}, eds, nil},
		{"terminating", []PodObs{func() PodObs { p := pod("f", "n2", "agent-v2", old); p.Terminating = true; return p }()}, eds, nil},
		{"an older validated template, being replaced", []PodObs{pod("h", "n2", "agent-v0", old)},
			map[string]EDSObs{"ns/agent": {Namespace: "ns", Name: "agent", Active: "agent-v1", Validated: map[string]bool{"agent-v0": true, "agent-v1": true}}}, nil},
		{"a failed canary's pod on its node, the status moved on", []PodObs{pod("i", "n1", "agent-v2", old)},
			map[string]EDSObs{"ns/agent": {Namespace: "ns", Name: "agent", Active: "agent-v1", CanaryOn: map[string]map[string]bool{"agent-v2": {"n1": true}}}}, nil},
		{"a failed canary's pod elsewhere", []PodObs{pod("j", "n2", "agent-v2", old)},
			map[string]EDSObs{"ns/agent": {Namespace: "ns", Name: "agent", Active: "agent-v1", CanaryOn: map[string]map[string]bool{"agent-v2": {"n1": true}}}}, []string{"ns/j"}},
		{"validated: the canary's template is active", []PodObs{pod("g", "n2", "agent-v2", old)},
			map[string]EDSObs{"ns/agent": {Namespace: "ns", Name: "agent", Active: "agent-v2"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, err := CanaryConfined(State{Now: now, Pods: tc.pods, EDS: tc.eds}, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if got := keys(fs); !equal(got, tc.want) {
				t.Errorf("findings %v, want %v: %+v", got, tc.want, fs)
			}
		})
	}
}

// TestPlantedCanaryOutsideItsNodes: an ExtendedDaemonSet whose canary of
// template v2 runs on node n1; a v2 pod on n1 and a v1 pod on n2 report
// nothing; a v2 pod on n2 is reported, with the pod's and the
// ExtendedDaemonSet's history.
func TestPlantedCanaryOutsideItsNodes(t *testing.T) {
	w := newWorld(t, Config{Limits: Limits{CanaryGrace: 300 * time.Millisecond}})
	ec, err := edsversioned.NewForConfig(rest.CopyConfig(testenv.Need(t, env).Config))
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "agent"}
	e := &edsv1alpha1.ExtendedDaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "agent"},
		Spec: edsv1alpha1.ExtendedDaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "agent:2"}}}}}}
	e, err = ec.EdsV1alpha1().ExtendedDaemonSets("default").Create(w.ctx, e, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ec.EdsV1alpha1().ExtendedDaemonSets("default").Delete(context.Background(), "agent", metav1.DeleteOptions{})
	})
	e.Status.ActiveReplicaSet = "agent-v1"
	e.Status.Canary = &edsv1alpha1.ExtendedDaemonSetStatusCanary{ReplicaSet: "agent-v2", Nodes: []string{"n1"}}
	if _, err := ec.EdsV1alpha1().ExtendedDaemonSets("default").UpdateStatus(w.ctx, e, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No controller-manager here: the default ServiceAccount pods need.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "default"}}
	if _, err := w.c.CoreV1().ServiceAccounts("default").Create(w.ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod := func(name, node, ers string) {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name,
			Labels: map[string]string{"app": "agent", edsv1alpha1.LabelName: "agent", edsv1alpha1.LabelReplicaSet: ers}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "agent", Image: "agent"}}}}
		if _, err := w.c.CoreV1().Pods("default").Create(w.ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			zero := int64(0)
			_ = w.c.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		})
	}
	pod("canary-n1", "n1", "agent-v2")
	pod("old-n2", "n2", "agent-v1")
	time.Sleep(time.Second) // past the grace, ticks judged them
	w.m.Tick()
	w.quiet("the canary on its node, the active template elsewhere")
	pod("canary-n2", "n2", "agent-v2")
	v := w.expect(InvCanaryConfined)
	if !strings.Contains(v.Message, "canary-n2") || !strings.Contains(v.Message, "runs on n2") {
		t.Errorf("message: %s", v.Message)
	}
	if len(v.History["Pod/default/canary-n2"]) == 0 || len(v.History["ExtendedDaemonSet/default/agent"]) == 0 {
		t.Errorf("history lacks the pod or the ExtendedDaemonSet: %v", v.History)
	}
}
