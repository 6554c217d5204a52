package agent

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"slipway.dev/slipway/ops/protocol"
)

// TestAnnouncedAgentDropsWhatMovedFromTheNode: an agent that stopped
// after announcing in its NodeUpdate but before removing its reports from
// the Node (or whose patch failed) finds them there when it starts again,
// already announced; it removes them then, as nothing reads them there.
func TestAnnouncedAgentDropsWhatMovedFromTheNode(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	node := f.NS + "-n0"
	f.Start(node)
	deadline := time.Now().Add(time.Minute)
	for {
		u, err := f.Ops.OpsV1().NodeUpdates(f.NS).Get(context.Background(), protocol.NodeUpdateName(node), metav1.GetOptions{})
		if err == nil && u.Status.Protocol >= protocol.NodeUpdateProtocol {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent never announced in its NodeUpdate: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	f.Stop(node)
	// What an agent stopped between its announcement and the removal left.
	patch := `{"metadata":{"annotations":{"` + protocol.AnnotationSlotReport + `":"{}","` + protocol.AnnotationRebootFrom + `":"boot-0"}}}`
	if _, err := f.Kube.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.Start(node)
	f.WaitNode(t, node, "the moved report and reboot-from removed from the Node", func(n *corev1.Node) bool {
		_, report := n.Annotations[protocol.AnnotationSlotReport]
		_, from := n.Annotations[protocol.AnnotationRebootFrom]
		return !report && !from
	})
}
