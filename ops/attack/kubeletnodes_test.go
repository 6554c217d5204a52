package attack

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/ops/testenv"
	uo "slipway.dev/slipway/ops/updateoperator"
)

// TestKubeletWritesOnlyItsOwnNode: a node's kubelet credentials (user
// system:node:<name>, group system:nodes, as the API server's Node
// authorizer and NodeRestriction admission see them) write the keys
// slipway reads on their own Node, and on no other: not a slot report, a
// channel view, the update operator's keys, a drain record, a label or the
// cordon of another Node. On its own Node, NodeRestriction refuses its
// taints and node-restriction.kubernetes.io/ labels. This is what every
// trust audit row about a Node's fields rests on: a node's word is about
// itself only.
func TestKubeletWritesOnlyItsOwnNode(t *testing.T) {
	e := testenv.Need(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := kubernetes.NewForConfigOrDie(e.Config)
	const own, other = "kubelet-own", "kubelet-other"
	for _, n := range []string{own, other} {
		if _, err := admin.CoreV1().Nodes().Create(ctx, testenv.FakeNode(n), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}) })
	}
	keys, _ := uo.NewKeys("")
	kubelet := kubernetes.NewForConfigOrDie(asKubelet(own)).CoreV1().Nodes()
	patch := func(node string, p map[string]any) error {
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		_, err = kubelet.Patch(ctx, node, types.MergePatchType, b, metav1.PatchOptions{DryRun: dryRun})
		return err
	}
	meta := func(field, key string) map[string]any {
		return map[string]any{"metadata": map[string]any{field: map[string]any{key: "forged"}}}
	}
	writes := map[string]map[string]any{
		"the slot report":                     meta("annotations", protocol.AnnotationSlotReport),
		"a channel view":                      meta("annotations", protocol.AnnotationChannelViewPrefix+"uid-1"),
		"the rootfs version":                  meta("annotations", protocol.AnnotationRootfsVersion),
		"the rootfs version label":            meta("labels", protocol.LabelRootfsVersion),
		"the drain record":                    meta("annotations", drain.AnnotationCordonedBy),
		"the update operator's finish time":   meta("annotations", keys.Key(uo.KeyFinished)),
		"the update operator's agent's state": meta("annotations", keys.Key(uo.KeyActionState)),
		"the cordon":                          {"spec": map[string]any{"unschedulable": true}},
	}
	for what, p := range writes {
		if err := patch(own, p); err != nil {
			t.Errorf("the kubelet cannot write %s on its own Node (Kubernetes grants it): %v", what, err)
		}
		if why := refused(patch(other, p), ""); why != "" {
			t.Errorf("node %s's kubelet wrote %s on Node %s: %s", own, what, other, why)
		}
	}
	for what, p := range map[string]map[string]any{
		"its taints": {"spec": map[string]any{"taints": []corev1.Taint{{Key: "forged", Effect: corev1.TaintEffectNoSchedule}}}},
		"a node-restriction.kubernetes.io/ label": meta("labels", "node-restriction.kubernetes.io/forged"),
	} {
		if why := refused(patch(own, p), ""); why != "" {
			t.Errorf("node %s's kubelet changed %s (NodeRestriction refuses it): %s", own, what, why)
		}
	}
}
