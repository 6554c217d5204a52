package eds

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
)

// Issue 24 item 12: the PodTemplate DataDog keeps for cluster-autoscaler:
// named after the ExtendedDaemonSet, labelled
// cluster-autoscaler.kubernetes.io/daemonset-pod=true, holding the spec's
// template and following it; the pods carry the annotation.
func TestPodTemplateForClusterAutoscaler(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.create(daemon("agent", "agent:v1"))
	h.rolledOut("agent", "agent:v1", clusterNodes)
	for _, p := range h.pods("agent") {
		if p.Annotations[v1.AnnotationAutoscalerDaemonSetPod] != "true" {
			t.Errorf("pod %s lacks %s=true", p.Name, v1.AnnotationAutoscalerDaemonSetPod)
		}
	}
	template := func(want string) {
		h.eventually(30*time.Second, "the PodTemplate with "+want, func() (bool, string) {
			pt, err := h.kube.CoreV1().PodTemplates(h.ns).Get(context.Background(), "agent", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			img := pt.Template.Spec.Containers[0].Image
			owned := len(pt.OwnerReferences) == 1 && pt.OwnerReferences[0].Kind == "ExtendedDaemonSet"
			return img == want && pt.Labels[v1.AnnotationAutoscalerDaemonSetPod] == "true" && owned,
				fmt.Sprintf("image %s, labels %v, owners %v", img, pt.Labels, pt.OwnerReferences)
		})
	}
	template("agent:v1")
	h.setImage("agent", "agent:v2")
	template("agent:v2")
}
