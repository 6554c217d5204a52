package controller

import (
	"context"
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// showViews writes on each of the fleet's nodes its view of ch, as the
// controller does after it writes ch's status: for tests whose controller
// is stopped, so that the test alone decides the slots.
func (f *fleet) showViews(t *testing.T, ch *v1.UpdateChannel) {
	t.Helper()
	ctx := context.Background()
	nodes, err := f.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "fleet=" + f.ns})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		var val any
		if v, ok := plan.ViewOf(ch, n.Name, true); ok {
			val = v.String()
		}
		data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{protocol.ViewKey(ch.UID): val}}})
		if _, err := f.kube.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestViewPrefixMatchesTheManifest: the controller's Node policy admits
// exactly the annotations the controller writes.
func TestViewPrefixMatchesTheManifest(t *testing.T) {
	if protocol.AnnotationChannelViewPrefix != manifest.ChannelViewPrefix {
		t.Errorf("ops/agent writes views under %q, the manifest admits %q", protocol.AnnotationChannelViewPrefix, manifest.ChannelViewPrefix)
	}
}
