package eds

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
)

// availability watches the pods of a label selector and records the
// largest number of nodes seen at once without an available pod.
type availability struct {
	mu       sync.Mutex
	byNode   map[string]map[string]bool // node -> pod -> available
	nodes    []string
	worst    int
	at       string // the pods by node when the worst was seen
	stop     func()
	finished chan struct{}
}

func (h *harness) watchAvailability(selector string, nodes []string) *availability {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a := &availability{byNode: map[string]map[string]bool{}, nodes: nodes, stop: cancel, finished: make(chan struct{})}
	list, err := h.kube.CoreV1().Pods(h.ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		h.t.Fatal(err)
	}
	for i := range list.Items {
		a.record(&list.Items[i], false)
	}
	a.worst, a.at = 0, ""
	w, err := h.kube.CoreV1().Pods(h.ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: list.ResourceVersion})
	if err != nil {
		h.t.Fatal(err)
	}
	go func() {
		defer close(a.finished)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			a.record(p, ev.Type == watch.Deleted)
		}
	}()
	return a
}

func (a *availability) record(p *corev1.Pod, deleted bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := p.Spec.NodeName
	if n == "" {
		return
	}
	if a.byNode[n] == nil {
		a.byNode[n] = map[string]bool{}
	}
	ready := false
	for _, c := range p.Status.Conditions {
		ready = ready || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
	}
	a.byNode[n][p.Name] = ready && !deleted && p.DeletionTimestamp == nil
	down := 0
	for _, node := range a.nodes {
		up := false
		for _, ok := range a.byNode[node] {
			up = up || ok
		}
		if !up {
			down++
		}
	}
	if down > a.worst {
		a.worst = down
		a.at = fmt.Sprint(a.byNode)
	}
}

func (a *availability) worstSeen() int {
	a.stop()
	<-a.finished
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.worst
}

func TestRollingUpdateNeverOverMaxUnavailable(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	e := daemon("agent", "agent:v1")
	two := intstr.FromInt32(2)
	e.Spec.Strategy.RollingUpdate.MaxUnavailable = &two
	h.create(e)
	h.rolledOut("agent", "agent:v1", clusterNodes)
	a := h.watchAvailability(v1.LabelName+"=agent", env.Nodes)
	h.setImage("agent", "agent:v2")
	h.rolledOut("agent", "agent:v2", clusterNodes)
	if worst := a.worstSeen(); worst > 2 || worst == 0 {
		t.Errorf("at worst %d nodes had no available pod; want 1..2 (maxUnavailable 2): %s", worst, a.at)
	}
	if ev := h.events("agent"); ev[EventRollingUpdate] == 0 || ev[EventRolledOut] == 0 {
		t.Errorf("events %v: want RollingUpdate and RolledOut", ev)
	}
}

func TestMigrationFromADaemonSet(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent-ds"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent-ds"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent-ds"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "daemon", Image: "agent:ds"}}}}}}
	if _, err := h.kube.AppsV1().DaemonSets(h.ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually(60*time.Second, "the DaemonSet on every node", func() (bool, string) {
		got, err := h.kube.AppsV1().DaemonSets(h.ns).Get(ctx, "agent-ds", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return got.Status.NumberAvailable == clusterNodes, fmt.Sprintf("%+v", got.Status)
	})
	a := h.watchAvailability("app in (agent-ds,agent)", env.Nodes)
	e := daemon("agent", "agent:v1")
	e.Annotations = map[string]string{v1.DataDog(v1.AnnotationOldDaemonSet): "agent-ds"} // DataDog's key is honoured
	one := intstr.FromInt32(1)
	e.Spec.Strategy.RollingUpdate.MaxUnavailable = &one
	h.create(e)
	h.rolledOut("agent", "agent:v1", clusterNodes)
	h.eventually(30*time.Second, "the DaemonSet's pods gone", func() (bool, string) {
		list, err := h.kube.CoreV1().Pods(h.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=agent-ds"})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 0, fmt.Sprintf("%d left", len(list.Items))
	})
	if worst := a.worstSeen(); worst > 1 {
		t.Errorf("during the migration %d nodes had no available daemon; want at most 1 (maxUnavailable 1)", worst)
	}
	if ev := h.events("agent"); ev[EventMigrating] == 0 {
		t.Errorf("events %v: want Migrating", ev)
	}
}

func TestSettingsAndNodeAnnotationsOverrideResources(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	byNode, lbl := env.Nodes[0], "kubernetes.io/hostname"
	setting := &v1.ExtendedDaemonsetSetting{ObjectMeta: metav1.ObjectMeta{Name: "big"},
		Spec: v1.ExtendedDaemonsetSettingSpec{Reference: &v1.CrossVersionObjectReference{Kind: "ExtendedDaemonSet", Name: "agent"},
			NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{lbl: byNode}},
			Containers: []v1.ExtendedDaemonsetSettingContainerSpec{{Name: "daemon", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("300Mi")}}}}}}
	if _, err := h.eds.EdsV1alpha1().ExtendedDaemonsetSettings(h.ns).Create(ctx, setting, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.create(daemon("agent", "agent:v1"))
	h.rolledOut("agent", "agent:v1", clusterNodes)
	memory := func(node string) string {
		for _, p := range h.pods("agent") {
			if p.Spec.NodeName == node && p.DeletionTimestamp == nil {
				return p.Spec.Containers[0].Resources.Requests.Memory().String()
			}
		}
		return "none"
	}
	if got := memory(byNode); got != "300Mi" {
		t.Errorf("node %s: memory request %s, want 300Mi from the setting", byNode, got)
	}
	if got := memory(env.Nodes[1]); got != "0" {
		t.Errorf("node %s: memory request %s, want none", env.Nodes[1], got)
	}
	// A node annotation (DataDog's key) replaces that node's pod.
	key := v1.DataDogNodeResourcesPrefix + h.ns + ".agent.daemon"
	annotated := env.Nodes[1]
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"{\"requests\":{\"memory\":\"50Mi\"}}"}}}`, key)
	if _, err := h.kube.CoreV1().Nodes().Patch(ctx, annotated, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unpatch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, key)
		_, _ = h.kube.CoreV1().Nodes().Patch(ctx, annotated, "application/merge-patch+json", []byte(unpatch), metav1.PatchOptions{})
	})
	h.eventually(30*time.Second, "the annotated node's pod replaced", func() (bool, string) {
		got := memory(annotated)
		return got == "50Mi", "memory " + got
	})
	h.rivalSettingLoses(setting, func() string { return memory(byNode) })
}

// rivalSettingLoses creates a younger setting selecting the same nodes as
// setting: it is marked Error and the older one keeps the node (memory reads
// the request there).
func (h *harness) rivalSettingLoses(setting *v1.ExtendedDaemonsetSetting, memory func() string) {
	t, ctx := h.t, context.Background()
	time.Sleep(time.Second) // creation timestamps have second precision
	rival := setting.DeepCopy()
	rival.ObjectMeta = metav1.ObjectMeta{Name: "rival"}
	rival.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("1Gi")
	if _, err := h.eds.EdsV1alpha1().ExtendedDaemonsetSettings(h.ns).Create(ctx, rival, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually(20*time.Second, "the rival setting marked Error", func() (bool, string) {
		got, err := h.eds.EdsV1alpha1().ExtendedDaemonsetSettings(h.ns).Get(ctx, "rival", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return got.Status.Status == v1.SettingStatusError && strings.Contains(got.Status.Error, "big"), fmt.Sprintf("%+v", got.Status)
	})
	got, err := h.eds.EdsV1alpha1().ExtendedDaemonsetSettings(h.ns).Get(ctx, "big", metav1.GetOptions{})
	if err != nil || got.Status.Status != v1.SettingStatusValid {
		t.Errorf("setting status %+v (%v), want Valid", got.Status, err)
	}
	if m := memory(); m != "300Mi" {
		t.Errorf("memory %s after the rival came, want the older setting's 300Mi", m)
	}
}

func TestInvalidSpecGetsAConditionAndAnEvent(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	// No containers is refused at admission (the template's real schema)...
	empty := daemon("empty", "agent:v1")
	empty.Spec.Template.Spec.Containers = nil
	if _, err := h.eds.EdsV1alpha1().ExtendedDaemonSets(h.ns).Create(context.Background(), empty, metav1.CreateOptions{}); err == nil ||
		!strings.Contains(err.Error(), "spec.template.spec.containers: Required value") {
		t.Errorf("an ExtendedDaemonSet without containers: %v, want the schema's refusal", err)
	}
	// ... a selector operator the schema does not enumerate reaches the controller.
	e := daemon("agent", "agent:v1")
	e.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Bogus"}}}
	h.create(e)
	h.eventually(20*time.Second, "the Invalid condition", func() (bool, string) {
		got := h.get("agent")
		for _, c := range got.Status.Conditions {
			if c.Type == v1.ConditionInvalid && c.Status == metav1.ConditionTrue {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", got.Status)
	})
	h.eventually(10*time.Second, "the Invalid Event", func() (bool, string) {
		ev := h.events("agent")
		return ev[EventInvalid] == 1, fmt.Sprint(ev)
	})
	if n := len(h.pods("agent")); n != 0 {
		t.Errorf("%d pods of an invalid spec", n)
	}
	// The schema refuses what CEL can check.
	bad := withCanary(daemon("bad", "agent:v1"), time.Minute)
	bad.Spec.Strategy.Canary.ValidationMode = v1.ValidationModeManual
	if _, err := h.eds.EdsV1alpha1().ExtendedDaemonSets(h.ns).Create(context.Background(), bad, metav1.CreateOptions{}); err == nil {
		t.Error("a manual canary with a duration was accepted")
	}
}

// Issue 24 item 6: the old DaemonSet's pod on a node the EDS does not
// select stays the DaemonSet's: it is not deleted (the DaemonSet
// controller would recreate it, every sync).
func TestMigrationLeavesUnselectedNodesToTheDaemonSet(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent-ds"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent-ds"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent-ds"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "daemon", Image: "agent:ds"}}}}}}
	if _, err := h.kube.AppsV1().DaemonSets(h.ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kept := env.Nodes[0]
	var before types.UID
	h.eventually(60*time.Second, "the DaemonSet on every node", func() (bool, string) {
		list, err := h.kube.CoreV1().Pods(h.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=agent-ds"})
		if err != nil {
			return false, err.Error()
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				running++
				if p.Spec.NodeName == kept {
					before = p.UID
				}
			}
		}
		return running == clusterNodes, fmt.Sprintf("%d running", running)
	})
	e := daemon("agent", "agent:v1")
	e.Annotations = map[string]string{v1.AnnotationOldDaemonSet: "agent-ds"}
	e.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "kubernetes.io/hostname", Operator: metav1.LabelSelectorOpNotIn, Values: []string{kept}}}}
	h.create(e)
	h.rolledOut("agent", "agent:v1", clusterNodes-1)
	list, err := h.kube.CoreV1().Pods(h.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=agent-ds"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].UID != before || list.Items[0].DeletionTimestamp != nil {
		var seen []string
		for _, p := range list.Items {
			seen = append(seen, fmt.Sprintf("%s on %s (uid %s, deleting %v)", p.Name, p.Spec.NodeName, p.UID, p.DeletionTimestamp != nil))
		}
		t.Errorf("the DaemonSet's pods %v; want only its pod %s on %s, untouched", seen, before, kept)
	}
}
