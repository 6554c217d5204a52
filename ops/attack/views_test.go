package attack

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/generated/clientset/versioned"
	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/protocol"
)

// The nodes' instructions: the controller writes on each Node what that
// node needs of each channel (its view: spec, target, its slot and
// permit); the agent reads only its own Node, and no channel.

// TestAgentReadsNoChannel (issue 22, the split's channel views): the agent
// on node-a can neither read nor watch nor write any channel, and cannot
// write its own instructions (a channel view) on its own Node.
func TestAgentReadsNoChannel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	agentCfg, asAgent := agentOnA(ctx, t)
	ns := agentOpts.Namespace
	admin := versioned.NewForConfigOrDie(env.Config).OpsV1().UpdateChannels(ns)
	ch, err := admin.Create(ctx, &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{GenerateName: "read-", Namespace: ns},
		Spec: v1.UpdateChannelSpec{URL: "file:///srv/mirror", Version: "v2"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	channels := versioned.NewForConfigOrDie(agentCfg).OpsV1().UpdateChannels(ns)
	watched := func() error {
		w, err := channels.Watch(ctx, metav1.ListOptions{})
		if err == nil {
			w.Stop()
		}
		return err
	}
	for name, err := range map[string]error{
		"read a channel":     second(channels.Get(ctx, ch.Name, metav1.GetOptions{})),
		"list the channels":  second(channels.List(ctx, metav1.ListOptions{})),
		"watch the channels": watched(),
		"read a channel's status": func() error {
			_, err := versioned.NewForConfigOrDie(agentCfg).OpsV1().RESTClient().Get().Namespace(ns).Resource("updatechannels").Name(ch.Name).SubResource("status").DoRaw(ctx)
			return err
		}(),
		"list channels elsewhere": second(versioned.NewForConfigOrDie(agentCfg).OpsV1().UpdateChannels("default").List(ctx, metav1.ListOptions{})),
		"create a channel":        second(channels.Create(ctx, &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: ns}, Spec: ch.Spec}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})),
		"delete a channel":        channels.Delete(ctx, ch.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}),
	} {
		if why := refused(err, ""); why != "" {
			t.Errorf("the agent could %s: %s", name, why)
		}
	}
	view := func(node string) error {
		patch := `{"metadata":{"annotations":{"` + protocol.AnnotationChannelViewPrefix + string(ch.UID) + `":"{\"name\":\"x\"}"}}}`
		_, err := asAgent.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}
	waitPolicy(t, "only annotations under", func() error { return view("node-a") })
	if why := refused(view("node-b"), ""); why != "" {
		t.Errorf("the agent could write node-b's channel view: %s", why)
	}
}

// TestControllerWritesOnlyViewsAndCordons: the controller writes the
// channel views and its cordon (for its drains) on any Node, and nothing
// else there: no label, no other annotation (a node's reports or
// versions), no taint.
func TestControllerWritesOnlyViewsAndCordons(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	agentOnA(ctx, t)
	asController := controllerOn(ctx, t)
	patch := func(p string) error {
		_, err := asController.CoreV1().Nodes().Patch(ctx, "node-a", types.MergePatchType, []byte(p), metav1.PatchOptions{})
		return err
	}
	const msg = "the slipway controller may"
	waitPolicy(t, msg, func() error { return patch(`{"metadata":{"labels":{"ops.slipway.dev/rootfs-version":"v9"}}}`) })
	if err := patch(`{"metadata":{"annotations":{"` + manifest.ChannelViewPrefix + `uid-1":"{}"}}}`); err != nil {
		t.Errorf("the controller cannot write a node's channel view: %v", err)
	}
	if err := patch(`{"spec":{"unschedulable":true},"metadata":{"annotations":{"drain.slipway.dev/cordoned-by":"slipway-agent"}}}`); err != nil {
		t.Errorf("the controller cannot cordon a node for its drain: %v", err)
	}
	for name, p := range map[string]string{
		"label a Node":             `{"metadata":{"labels":{"ops.slipway.dev/rootfs-version":"v9"}}}`,
		"forge a node's report":    `{"metadata":{"annotations":{"` + protocol.AnnotationSlotReport + `":"{\"forged\":{}}"}}}`,
		"write another annotation": `{"metadata":{"annotations":{"example.com/x":"y"}}}`,
		"taint a Node":             `{"spec":{"taints":[{"key":"x","effect":"NoSchedule"}]}}`,
		"write a node's versions":  `{"metadata":{"annotations":{"ops.slipway.dev/rootfs-version":"v0"}}}`,
	} {
		if why := refused(patch(p), msg); why != "" {
			t.Errorf("the controller could %s: %s", name, why)
		}
	}
}
