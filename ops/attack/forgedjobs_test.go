package attack

import (
	"context"
	"os"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"slipway.dev/slipway/ops/agent"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/controller"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/protocol"
)

// The forged Jobs: node-a's agent token creates Jobs that the readers of
// node-b (its agent, the controller) would take for node-b's own, in a
// whole simulated cluster (real API server, the manifest's RBAC and
// policies, real bound tokens, the agents and the controller in process).
// node-b must not be held, drained, rebooted, failed or delayed by them.

// forgeFleet is a fleet of two nodes run as the manifest's ServiceAccounts:
// a (the attacker: only its token is used, its agent never runs) and b
// (the victim, the only node the channel selects). It returns the fleet,
// the two node names, the channel's spec and node-a's client.
func forgeFleet(t *testing.T) (f *fleettest.Fleet, a, b string, spec v1.UpdateChannelSpec, asA kubernetes.Interface) {
	t.Helper()
	f = fleettest.New(t, env, 2, fleettest.Programs{Agent: fleetAgent, Controller: fleetController})
	mirror := t.TempDir()
	if err := os.MkdirAll(mirror+"/v2", 0o755); err != nil {
		t.Fatal(err)
	}
	f.AsServiceAccount(manifest.Options{MirrorDirs: []string{mirror}})
	a, b = f.NS+"-n0", f.NS+"-n1"
	if err := f.PatchNodeLabel(b, "attack-target", f.NS); err != nil {
		t.Fatal(err)
	}
	spec = v1.UpdateChannelSpec{URL: "file://" + mirror, Version: "v2", RebootDelay: fleettest.ZeroDelay(), MaxFailures: 1,
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"attack-target": f.NS}}}
	return f, a, b, spec, kubernetes.NewForConfigOrDie(f.Configs[a])
}

func fleetAgent(r fleettest.AgentRun) func(context.Context) error {
	o := agent.Options{NodeName: r.Node, Namespace: r.Namespace, SystemDir: r.SystemDir, Config: r.Config, Image: "slipway:test",
		BootIDFile: r.BootIDFile, Rebooter: r.Rebooter, LeaseDuration: 3 * time.Second, Resync: 5 * time.Second, Log: r.Log}
	return func(ctx context.Context) error { return agent.Run(ctx, o) }
}

func fleetController(r fleettest.ControllerRun) func(context.Context) error {
	o := controller.Options{Identity: r.Identity, Namespace: r.Namespace, Config: r.Config, Log: r.Log, Resync: 5 * time.Second, LeaseDuration: 3 * time.Second}
	return func(ctx context.Context) error { return controller.Run(ctx, o) }
}

// forgedFor is the Job node b's agent builds for slot of ch, pinned to
// node a instead (what a's token may create: its own node's pod).
func forgedFor(t *testing.T, ns, a, b string, ch *v1.UpdateChannel, slot v1.Slot) *batchv1.Job {
	t.Helper()
	j, err := agent.UpgradeJob(agent.Options{NodeName: b, Image: "slipway:test", Namespace: ns}, ch, slot)
	if err != nil {
		t.Fatal(err)
	}
	j.Spec.Template.Spec.NodeName = a
	return j
}

// endsWell waits until b's rollout ends and checks that it ended as a
// rollout with no attack would: b at v2, no failure, not Degraded.
func endsWell(t *testing.T, f *fleettest.Fleet, b string) {
	t.Helper()
	ch := f.WaitFor("node-b's rollout to end", 3*time.Minute, func(ch *v1.UpdateChannel) bool {
		return fleettest.Done(1)(ch) || len(ch.Status.Failed) > 0 || fleettest.IsTrue(ch, v1.ConditionDegraded)
	})
	if len(ch.Status.Failed) > 0 || fleettest.IsTrue(ch, v1.ConditionDegraded) {
		t.Errorf("node-b failed: %+v; conditions %+v", ch.Status.Failed, ch.Status.Conditions)
	}
	if cur := f.Current(b); cur != "v2" {
		t.Errorf("node-b runs %s, not v2", cur)
	}
}

// TestForgedStagingJobHoldsNoOtherNode replays the first forged-Job attack:
// a suspended "staging" Job pinned to node-a but labelled and annotated
// for node-b. Admitted, it held node-b's slot until the slot timeout (its
// agent waited for "its" staging to end). The policy refuses it; created
// anyway (by an administrator: a Job from before the policy), node-b's
// agent ignores it, since it is not pinned to node-b.
func TestForgedStagingJobHoldsNoOtherNode(t *testing.T) {
	t.Parallel()
	f, a, b, spec, asA := forgeFleet(t)
	ctx := context.Background()
	f.Start(b)
	f.AgentsUp(b)
	ch := &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: f.NS, UID: "forged"}, Spec: spec}
	j := forgedFor(t, f.NS, a, b, ch, v1.Slot{Node: b, Version: "v2", Attempt: 1, Since: metav1.Now()})
	j.Name = "stage-" + b + "-v2-forged-1"
	yes := true
	j.Spec.Suspend = &yes // never runs: "staging" for ever
	for _, m := range []map[string]string{j.Annotations, j.Spec.Template.Annotations} {
		m[protocol.AnnotationJobAction] = protocol.JobActionStage
	}
	_, err := asA.BatchV1().Jobs(f.NS).Create(ctx, j, metav1.CreateOptions{})
	if err == nil {
		t.Errorf("node-a's agent created a staging Job labelled for node-b")
	} else if why := refused(err, "upgrade Jobs"); why != "" {
		t.Errorf("node-a's forged staging Job: %s", why)
	} else if _, err := f.Kube.BatchV1().Jobs(f.NS).Create(ctx, j, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.Channel(spec)
	endsWell(t, f, b)
}

// TestForgedSlotJobRebootsNoOtherNode replays the second forged-Job attack:
// node-a reads node-b's slot in node-b's channel view (every agent may
// read every Node), creates a Job of that slot's name and annotations
// pinned to itself, and lets it succeed. Admitted, node-b took it for its
// own upgrade: the controller drained node-b, node-b rebooted into v1 and
// was recorded as failed. The policy refuses the name and annotations of
// another node.
func TestForgedSlotJobRebootsNoOtherNode(t *testing.T) {
	t.Parallel()
	f, a, b, spec, asA := forgeFleet(t)
	ctx := context.Background()
	f.Start(b)
	f.AgentsUp(b)
	f.Stop(b) // the attacker is first: node-b's agent starts again once the forged Job is there
	f.Channel(spec)
	uid, view := slotOf(ctx, t, f, b)
	j := forgedFor(t, f.NS, a, b, view.Channel(uid), *view.Slot)
	_, err := asA.BatchV1().Jobs(f.NS).Create(ctx, j, metav1.CreateOptions{})
	if err == nil {
		t.Errorf("node-a's agent created node-b's slot Job %s", j.Name)
		waitJobDone(ctx, t, f, j.Name)
	} else if why := refused(err, "upgrade Jobs"); why != "" {
		t.Errorf("node-a's forged slot Job: %s", why)
	}
	boot, _ := os.ReadFile(f.BootFile(b))
	f.Start(b)
	endsWell(t, f, b)
	if after, _ := os.ReadFile(f.BootFile(b)); string(after) == string(boot) {
		t.Errorf("node-b finished its upgrade without its own reboot")
	}
}

// slotOf waits until node b's view shows its slot, and returns the view
// and its channel's UID. The attacker is granted node-b's slot as its own
// agent reads it, from its Node or, once that agent announced it reads
// there, its NodeUpdate (which node-a's token cannot read): the worst case.
func slotOf(ctx context.Context, t *testing.T, f *fleettest.Fleet, b string) (types.UID, protocol.View) {
	t.Helper()
	var uid types.UID
	var view protocol.View
	deadline := time.Now().Add(2 * time.Minute)
	for view.Slot == nil {
		if time.Now().After(deadline) {
			t.Fatal("node-b's view never showed its slot")
		}
		time.Sleep(100 * time.Millisecond)
		n, err := f.Kube.CoreV1().Nodes().Get(ctx, b, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		u, err := f.Ops.OpsV1().NodeUpdates(f.NS).Get(ctx, protocol.NodeUpdateName(b), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			u, err = nil, nil
		}
		if err != nil {
			t.Fatal(err)
		}
		for id, v := range protocol.NodeViews(n.Annotations, u, f.NS, func(string, error) {}) {
			uid, view = id, v
		}
	}
	return uid, view
}

// TestForgedSlotPodRebootsNoOtherNode is the forged slot Job's attack with
// Pods: node-a reads node-b's slot and creates node-b's slot Pod bound to
// itself (it may bind none to node-b), or its own slot Pod owned by
// node-b's slot Job (readers trust a pod's controller). The policy refuses
// both; created anyway (by an administrator, under names of their own),
// node-b's readers take neither for node-b's: the first is not bound to
// node-b, the second has an owner.
func TestForgedSlotPodRebootsNoOtherNode(t *testing.T) {
	t.Parallel()
	f, a, b, spec, asA := forgeFleet(t)
	ctx := context.Background()
	defaultServiceAccount(ctx, t, f.NS)
	f.Start(b)
	f.AgentsUp(b)
	f.Stop(b) // the attacker is first: node-b's agent starts again once the forged Pods are there
	f.Channel(spec)
	uid, view := slotOf(ctx, t, f, b)
	podsOf := func(node string) map[string]*corev1.Pod {
		slot := *view.Slot
		slot.Node = node
		pods, err := agent.SlotPods(agent.Options{NodeName: node, Image: "slipway:test", Namespace: f.NS}, view.Channel(uid), slot)
		if err != nil {
			t.Fatal(err)
		}
		return pods
	}
	theirs := podsOf(b)[agent.PodUpgrade]
	theirs.Spec.NodeName = a
	owned := podsOf(a)[agent.PodUpgrade]
	owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: theirs.Name, UID: "forged", Controller: ptr.To(true)}}
	waitPodPolicy(ctx, t, asA.CoreV1().Pods(f.NS), theirs)
	for what, p := range map[string]*corev1.Pod{"node-b's slot Pod bound to node-a": theirs, "its own slot Pod owned by node-b's slot Job": owned} {
		_, err := asA.CoreV1().Pods(f.NS).Create(ctx, p, metav1.CreateOptions{})
		if err == nil {
			t.Errorf("node-a's agent created %s", what)
		} else if why := refused(err, slotPodRefusal); why != "" {
			t.Errorf("node-a's %s: %s", what, why)
		} else if _, err := f.Kube.CoreV1().Pods(f.NS).Create(ctx, forgedCopy(p), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	boot, _ := os.ReadFile(f.BootFile(b))
	f.Start(b)
	endsWell(t, f, b)
	if after, _ := os.ReadFile(f.BootFile(b)); string(after) == string(boot) {
		t.Errorf("node-b finished its upgrade without its own reboot")
	}
}

// forgedCopy is p under a name of its own (its node's prefix kept): an
// administrator who takes a node's slot Pod name holds that node's slot
// (its agent finds the name taken and waits for the slot's timeout), which
// is an administrator's right, not the attack.
func forgedCopy(p *corev1.Pod) *corev1.Pod {
	q := p.DeepCopy()
	q.Name += "-forged"
	return q
}

// waitJobDone waits until the simulated kubelet finished Job name.
func waitJobDone(ctx context.Context, t *testing.T, f *fleettest.Fleet, name string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		j, err := f.Kube.BatchV1().Jobs(f.NS).Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if done, failed, _, _ := protocol.JobOutcome(j); err == nil && (done || failed) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("Job %s never finished", name)
}
