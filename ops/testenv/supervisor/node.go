package supervisor

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"slipway.dev/slipway/ops/testenv/executor"
)

// setDown sets or removes the node's DownAnnotation.
func setDown(ctx context.Context, cs kubernetes.Interface, node string, down bool) error {
	var val any // null removes the annotation
	if down {
		val = "true"
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{DownAnnotation: val}}})
	if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("mark node %s down=%v: %w", node, down, err)
	}
	return nil
}

// setBootID gives the node a new boot ID, as a rebooted kubelet would report.
func setBootID(ctx context.Context, cs kubernetes.Interface, node, id string) error {
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"nodeInfo": map[string]any{"bootID": id}}})
	if _, err := cs.CoreV1().Nodes().PatchStatus(ctx, node, patch); err != nil {
		return fmt.Errorf("set node %s's boot ID: %w", node, err)
	}
	return nil
}

// waitReady watches node until its Ready condition is True (ready) or not True (!ready).
func waitReady(ctx context.Context, cs kubernetes.Interface, node string, ready bool) error {
	lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "nodes", "", fields.OneTermEqualSelector("metadata.name", node))
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.Node{}, nil, func(ev watch.Event) (bool, error) {
		n, ok := ev.Object.(*corev1.Node)
		return ok && ev.Type != watch.Deleted && isReady(n) == ready, nil
	})
	if err != nil {
		return fmt.Errorf("wait for node %s Ready=%v: %w", node, ready, err)
	}
	return nil
}

func isReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podsReadyAgain marks the pods bound to node Ready again, as a kubelet
// back from a reboot reports its restarted containers: the node lifecycle
// controller marked them NotReady while the node was down, and kwok's
// stages make only Pending pods Ready. Pods the executor runs (labelled
// skip=skipValue) report their own status.
func podsReadyAgain(ctx context.Context, cs kubernetes.Interface, node string) error {
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		return fmt.Errorf("list the pods of node %s: %w", node, err)
	}
	now := metav1.Now().UTC().Format("2006-01-02T15:04:05Z")
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []map[string]any{
		{"type": string(corev1.PodReady), "status": "True", "lastTransitionTime": now},
		{"type": string(corev1.ContainersReady), "status": "True", "lastTransitionTime": now},
	}}})
	for _, p := range pods.Items {
		if p.Labels[executor.LabelKey] == executor.LabelValue || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || podReady(&p) {
			continue
		}
		_, err := cs.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("mark pod %s/%s Ready after node %s's reboot: %w", p.Namespace, p.Name, node, err)
		}
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
