package eds

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
)

func memorySetting(name, memory string, sel metav1.LabelSelector) *v1.ExtendedDaemonsetSetting {
	return &v1.ExtendedDaemonsetSetting{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.ExtendedDaemonsetSettingSpec{Reference: &v1.CrossVersionObjectReference{Kind: "ExtendedDaemonSet", Name: "agent"},
			NodeSelector: sel,
			Containers: []v1.ExtendedDaemonsetSettingContainerSpec{{Name: "daemon", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(memory)}}}}}}
}

// Defect: a setting in error (it selects a node an older setting selects)
// still applied on the nodes where it did not conflict. As DataDog's, it
// applies nowhere.
func TestSettingInErrorAppliesNowhere(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	a, b := h.addNode("a"), h.addNode("b")
	older := memorySetting("older", "100Mi", metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/hostname": a}})
	if _, err := h.eds.EdsV1alpha1().ExtendedDaemonsetSettings(h.ns).Create(ctx, older, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)                                                                                              // creation timestamps have second precision
	younger := memorySetting("younger", "200Mi", metav1.LabelSelector{MatchLabels: map[string]string{"eds-test": h.ns}}) // a and b
	if _, err := h.eds.EdsV1alpha1().ExtendedDaemonsetSettings(h.ns).Create(ctx, younger, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.create(h.ownDaemon("agent", "agent:v1"))
	h.rolledOut("agent", "agent:v1", 2)
	h.eventually(20*time.Second, "the younger setting in error", func() (bool, string) {
		got, err := h.eds.EdsV1alpha1().ExtendedDaemonsetSettings(h.ns).Get(ctx, "younger", metav1.GetOptions{})
		return err == nil && got.Status.Status == v1.SettingStatusError, fmt.Sprint(err, got.Status)
	})
	memory := map[string]string{}
	for _, p := range h.pods("agent") {
		memory[p.Spec.NodeName] = p.Spec.Containers[0].Resources.Requests.Memory().String()
	}
	if memory[a] != "100Mi" || memory[b] != "0" {
		t.Errorf("memory requests %v: want 100Mi on %s (the older setting) and none on %s (the younger one is in error)", memory, a, b)
	}
}

func TestFailedMessage(t *testing.T) {
	if got := failedMessage("agent-1", nil, ""); got != "ERS agent-1: failed" {
		t.Errorf("no nodes known: %q", got)
	}
	if got := failedMessage("agent-1", []string{"n1", "n2"}, ""); got != "ERS agent-1: failed on nodes n1, n2" {
		t.Errorf("nodes known: %q", got)
	}
	if got := failedMessage("agent-1", []string{"n1"}, "analysis: query errors = 0.5"); got != "ERS agent-1: failed on nodes n1; analysis: query errors = 0.5" {
		t.Errorf("with the analysis's detail: %q", got)
	}
}
