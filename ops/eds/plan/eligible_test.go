package plan

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestEligibleAndMayStay(t *testing.T) {
	taint := func(effect corev1.TaintEffect) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"zone": "a"}},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Value: "x", Effect: effect}}}}
	}
	plain := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"zone": "a"}}}
	spec := &corev1.PodSpec{}
	other := &corev1.PodSpec{NodeSelector: map[string]string{"zone": "b"}}
	cases := []struct {
		name           string
		node           *corev1.Node
		spec           *corev1.PodSpec
		eligible, stay bool
	}{
		{"plain node", plain, spec, true, true},
		{"NoSchedule: no new pod, the running one stays", taint(corev1.TaintEffectNoSchedule), spec, false, true},
		{"NoExecute: neither", taint(corev1.TaintEffectNoExecute), spec, false, false},
		{"nodeSelector excludes: neither", plain, other, false, false},
	}
	for _, tc := range cases {
		if got := Eligible(tc.node, labels.Everything(), tc.spec); got != tc.eligible {
			t.Errorf("%s: Eligible %v, want %v", tc.name, got, tc.eligible)
		}
		if got := MayStay(tc.node, labels.Everything(), tc.spec); got != tc.stay {
			t.Errorf("%s: MayStay %v, want %v", tc.name, got, tc.stay)
		}
	}
}
