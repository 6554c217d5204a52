package attack

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/generated/clientset/versioned"
	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/protocol"
)

// The controller split: the fleet's decisions (the election, the token
// Secret) belong to `slipway ops controller`, and a node's agent holds no
// right to them; the controller holds no right over a Node but reads.

// controllerOn returns the clients of the controller's pod (on node-cp).
func controllerOn(ctx context.Context, t *testing.T) kubernetes.Interface {
	t.Helper()
	return kubernetes.NewForConfigOrDie(podOn(ctx, t, agentOpts.Namespace, manifest.ControllerName, "node-cp"))
}

// secrets creates the token Secret and another one.
func secrets(ctx context.Context, t *testing.T) {
	t.Helper()
	admin := kubernetes.NewForConfigOrDie(env.Config)
	for _, name := range []string{"gh-token", "other"} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: agentOpts.Namespace}, StringData: map[string]string{"token": "t"}}
		if _, err := admin.CoreV1().Secrets(agentOpts.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// TestAgentReadsNoSecret (issue 22, "read a Secret it has no use for";
// the split's (d)): the agent on node-a reads no Secret, the token Secret
// included; the controller reads the token Secret.
func TestAgentReadsNoSecret(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, asAgent := agentOnA(ctx, t)
	asController := controllerOn(ctx, t)
	secrets(ctx, t)
	if _, err := asController.CoreV1().Secrets(agentOpts.Namespace).Get(ctx, "gh-token", metav1.GetOptions{}); err != nil {
		t.Errorf("the controller cannot read the token Secret: %v", err)
	}
	s := asAgent.CoreV1().Secrets(agentOpts.Namespace)
	for name, err := range map[string]error{
		"read the token Secret":        second(s.Get(ctx, "gh-token", metav1.GetOptions{})),
		"read another Secret":          second(s.Get(ctx, "other", metav1.GetOptions{})),
		"list the Secrets":             second(s.List(ctx, metav1.ListOptions{})),
		"read a Secret of kube-system": second(asAgent.CoreV1().Secrets("kube-system").Get(ctx, "gh-token", metav1.GetOptions{})),
	} {
		if why := refused(err, ""); why != "" {
			t.Errorf("the agent could %s: %s", name, why)
		}
	}
}

// TestControllerReadsOnlyTheTokenSecret: the controller reads the token
// Secret by name and no other, and lists or watches none.
func TestControllerReadsOnlyTheTokenSecret(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	agentOnA(ctx, t)
	asController := controllerOn(ctx, t)
	secrets(ctx, t)
	s := asController.CoreV1().Secrets(agentOpts.Namespace)
	for name, err := range map[string]error{
		"read another Secret":          second(s.Get(ctx, "other", metav1.GetOptions{})),
		"list the Secrets":             second(s.List(ctx, metav1.ListOptions{})),
		"watch the Secrets":            second(s.Watch(ctx, metav1.ListOptions{})),
		"read a Secret of kube-system": second(asController.CoreV1().Secrets("kube-system").Get(ctx, "gh-token", metav1.GetOptions{})),
	} {
		if why := refused(err, ""); why != "" {
			t.Errorf("the controller could %s: %s", name, why)
		}
	}
}

// TestAgentTakesNoElectionLease (the split's (b)): the agent on node-a
// cannot create or take over the controller's election Lease, nor a
// channel Lease of the former per-channel election; the controller takes
// and renews it, and writes no other Lease (no node's heartbeat).
func TestAgentTakesNoElectionLease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, asAgent := agentOnA(ctx, t)
	asController := controllerOn(ctx, t)
	ns := agentOpts.Namespace
	lease := func(name, holder string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15)}}
	}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	const msg = "own node's heartbeat Lease"
	waitPolicy(t, msg, func() error {
		return second(asAgent.CoordinationV1().Leases(ns).Create(ctx, lease(protocol.ControllerLease, "node-a"), dry))
	})
	held, err := asController.CoordinationV1().Leases(ns).Create(ctx, lease(protocol.ControllerLease, "controller-0"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the controller cannot take its Lease: %v", err)
	}
	held.Spec.RenewTime = ptr.To(metav1.NowMicro())
	if held, err = asController.CoordinationV1().Leases(ns).Update(ctx, held, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("the controller cannot renew its Lease: %v", err)
	}
	takeover := held.DeepCopy()
	takeover.Spec.HolderIdentity = ptr.To("node-a")
	for name, err := range map[string]error{
		"create the controller's Lease":    second(asAgent.CoordinationV1().Leases(ns).Create(ctx, lease(protocol.ControllerLease+"-x", "node-a"), dry)),
		"take the controller's Lease over": second(asAgent.CoordinationV1().Leases(ns).Update(ctx, takeover, metav1.UpdateOptions{})),
		"create a channel's Lease":         second(asAgent.CoordinationV1().Leases(ns).Create(ctx, lease("slipway-upchan-default", "node-a"), dry)),
	} {
		if why := refused(err, msg); why != "" {
			t.Errorf("the agent could %s: %s", name, why)
		}
	}
	const ctrlMsg = "its own election Lease"
	for name, err := range map[string]error{
		"write node-a's heartbeat": second(asController.CoordinationV1().Leases(ns).Create(ctx, lease(protocol.AgentLeaseName("node-a"), "node-a"), dry)),
		"write another Lease":      second(asController.CoordinationV1().Leases(ns).Create(ctx, lease("kube-scheduler", "controller-0"), dry)),
	} {
		if why := refused(err, ctrlMsg); why != "" {
			t.Errorf("the controller could %s: %s", name, why)
		}
	}
}

// TestControllerCreatesNoJobOrPod: the controller reads Nodes, labels
// none, and creates no Job and no pod (its drains cordon and evict:
// TestAgentEvictsNoPod, TestControllerWritesOnlyViewsAndCordons).
func TestControllerCreatesNoJobOrPod(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	agentOnA(ctx, t)
	asController := controllerOn(ctx, t)
	if _, err := asController.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); err != nil {
		t.Errorf("the controller cannot read a Node: %v", err)
	}
	ns := agentOpts.Namespace
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	job := legitJob(t, channelOf(v1.UpdateChannelSpec{URL: "file:///srv/mirror", Version: "v2"}))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns}, Spec: job.Spec.Template.Spec}
	waitPolicy(t, "the slipway controller may", func() error {
		return second(asController.CoreV1().Nodes().Patch(ctx, "node-a", types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"ops.slipway.dev/rootfs-version":"v9"}}}`), metav1.PatchOptions{}))
	})
	for name, err := range map[string]error{
		"label a Node": second(asController.CoreV1().Nodes().Patch(ctx, "node-a", types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"ops.slipway.dev/rootfs-version":"v9"}}}`), metav1.PatchOptions{})),
		"create an upgrade Job": second(asController.BatchV1().Jobs(ns).Create(ctx, job.DeepCopy(), dry)),
		"create a Job":          second(asController.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j"}, Spec: job.Spec}, dry)),
		"create a pod":          second(asController.CoreV1().Pods(ns).Create(ctx, pod, dry)),
	} {
		if why := refused(err, ""); why != "" {
			t.Errorf("the controller could %s: %s", name, why)
		}
	}
}

// TestAgentWritesNoChannelStatus (the split's (a)): the agent on node-a
// cannot write a channel's status (other nodes' slots, permits,
// latestVersion, failures), by update or patch; it reports its own slot on
// its own Node, and not on another's; the controller writes the status.
func TestAgentWritesNoChannelStatus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	agentCfg, asAgent := agentOnA(ctx, t)
	ctrlCfg := podOn(ctx, t, agentOpts.Namespace, manifest.ControllerName, "node-cp")
	admin := versioned.NewForConfigOrDie(env.Config).OpsV1().UpdateChannels(agentOpts.Namespace)
	ch, err := admin.Create(ctx, &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "status", Namespace: agentOpts.Namespace},
		Spec: v1.UpdateChannelSpec{URL: "file:///srv/mirror", Version: "v2"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ch.Status.Updating = []v1.Slot{{Node: "node-b", Version: "v2", Attempt: 1, Since: metav1.Now()}}
	if ch, err = versioned.NewForConfigOrDie(ctrlCfg).OpsV1().UpdateChannels(ch.Namespace).UpdateStatus(ctx, ch, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("the controller cannot write the channel's status: %v", err)
	}
	report := func(node string) error {
		patch := `{"metadata":{"annotations":{"` + protocol.AnnotationSlotReport + `":"{}"}}}`
		_, err := asAgent.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}
	waitPolicy(t, "only the Node it runs on", func() error { return report("node-b") })
	if err := report("node-a"); err != nil {
		t.Errorf("the agent cannot report on its own Node: %v", err)
	}
	channels := versioned.NewForConfigOrDie(agentCfg).OpsV1().UpdateChannels(ch.Namespace)
	taken := ch.DeepCopy()
	taken.Status.Updating = []v1.Slot{{Node: "node-a", Version: "v2", Attempt: 1, Since: metav1.Now()}}
	for name, err := range map[string]error{
		"take node-b's slot":      second(channels.UpdateStatus(ctx, taken, metav1.UpdateOptions{})),
		"free node-b's slot":      second(channels.Patch(ctx, ch.Name, types.JSONPatchType, []byte(`[{"op":"remove","path":"/status/updating/0"}]`), metav1.PatchOptions{}, "status")),
		"set the latest version":  second(channels.Patch(ctx, ch.Name, types.MergePatchType, []byte(`{"status":{"latestVersion":"v0"}}`), metav1.PatchOptions{}, "status")),
		"give itself a permit":    second(channels.Patch(ctx, ch.Name, types.MergePatchType, []byte(`{"status":{"staging":[{"node":"node-a","version":"v2"}]}}`), metav1.PatchOptions{}, "status")),
		"write the channel spec":  second(channels.Patch(ctx, ch.Name, types.MergePatchType, []byte(`{"spec":{"version":"v0"}}`), metav1.PatchOptions{})),
		"record node-b as failed": second(channels.Patch(ctx, ch.Name, types.MergePatchType, []byte(`{"status":{"failed":[{"node":"node-b","version":"v2","reason":"x","at":"2026-01-01T00:00:00Z","attempts":9}]}}`), metav1.PatchOptions{}, "status")),
	} {
		if why := refused(err, ""); why != "" {
			t.Errorf("the agent could %s: %s", name, why)
		}
	}
}

// TestAgentTakesNoServerSlot (the split's (b)): the server slot is the
// controller's decision, in channel status; the agent on node-a cannot
// create or overwrite the Lease that once held it (slipway-server-slot),
// nor any Lease but its heartbeat.
func TestAgentTakesNoServerSlot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, asAgent := agentOnA(ctx, t)
	ns := agentOpts.Namespace
	admin := kubernetes.NewForConfigOrDie(env.Config)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "slipway-server-slot", Namespace: ns},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("main/uid/node-b/1")}}
	held, err := admin.CoordinationV1().Leases(ns).Create(ctx, l, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	const msg = "own node's heartbeat Lease"
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	waitPolicy(t, msg, func() error {
		return second(asAgent.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns}}, dry))
	})
	if held != nil {
		taken := held.DeepCopy()
		taken.Spec.HolderIdentity = ptr.To("main/uid/node-a/2")
		if why := refused(second(asAgent.CoordinationV1().Leases(ns).Update(ctx, taken, metav1.UpdateOptions{})), msg); why != "" {
			t.Errorf("the agent could take the server slot over: %s", why)
		}
	}
	fresh := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "slipway-server-slot-x", Namespace: ns}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-a")}}
	if why := refused(second(asAgent.CoordinationV1().Leases(ns).Create(ctx, fresh, dry)), msg); why != "" {
		t.Errorf("the agent could create a server-slot Lease: %s", why)
	}
}
