package attack

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"slipway.dev/slipway/ops/agent"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/protocol"
)

// The slot Pods: a slot's work (an upgrade, an activation, a rollback
// slot's rollback) and a staging run ahead of the slot run in a Pod the
// agent creates bound to its own node,
// not in a Job (docs/design/2026-11-30-slot-pod-not-job.md). Every Job
// attack has its Pod version here: the Pod policy must refuse what the Job
// policy refuses, and a Pod's own fields (its binding, its owner, its
// deadline) besides.

// What the Pod policy's refusals say, and the Pod delete policy's.
const (
	slotPodRefusal       = "slot Pods"
	slotPodDeleteRefusal = "delete only its own node's slot Pods"
)

// legitSlotPods are the slot Pods of every kind the agent on node-a really
// creates for a slot of ch.
func legitSlotPods(t *testing.T, ch *v1.UpdateChannel) map[string]*corev1.Pod {
	t.Helper()
	pods, err := agent.SlotPods(agent.Options{NodeName: "node-a", Image: agentOpts.Image, Namespace: agentOpts.Namespace}, ch,
		v1.Slot{Node: "node-a", Version: "v2", Attempt: 1, Since: metav1.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return pods
}

// podOfJob is the Pod an agent would make of Job j as it makes a slot's
// (ops/agent's slotPodOf): what a compromised agent would create to run a
// Job that must stay a Job (a staging, a pruning) as a Pod.
func podOfJob(j *batchv1.Job) *corev1.Pod {
	annotations := maps.Clone(j.Annotations)
	maps.Copy(annotations, j.Spec.Template.Annotations)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: j.Name, Namespace: j.Namespace, Labels: maps.Clone(j.Labels), Annotations: annotations},
		Spec: *j.Spec.Template.Spec.DeepCopy()}
	p.Spec.ActiveDeadlineSeconds = ptr.To(*j.Spec.ActiveDeadlineSeconds)
	return p
}

// waitPodPolicy waits until the API server loaded the Pod policy.
func waitPodPolicy(ctx context.Context, t *testing.T, pods podCreator, p *corev1.Pod) {
	t.Helper()
	waitPolicy(t, slotPodRefusal, func() error {
		q := p.DeepCopy()
		q.Spec.NodeName = "node-b"
		_, err := pods.Create(ctx, q, metav1.CreateOptions{DryRun: dryRun})
		return err
	})
}

type podCreator interface {
	Create(context.Context, *corev1.Pod, metav1.CreateOptions) (*corev1.Pod, error)
}

// TestAgentCreatesOnlyItsOwnNodesSlotPods: the agent on node-a creates the
// slot Pods it really builds (a slot's upgrade or activation, a staging
// run, a rollback slot's), bound to its own node, and no Pod of another
// node, another shape, another kind (a pruning stays a Job), another
// namespace, with an owner or a finalizer.
func TestAgentCreatesOnlyItsOwnNodesSlotPods(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, asAgent := agentOnA(ctx, t)
	pods := asAgent.CoreV1().Pods(agentOpts.Namespace)
	dry := metav1.CreateOptions{DryRun: dryRun}
	mirrorCh := channelOf(v1.UpdateChannelSpec{URL: "file:///srv/mirror", Version: "v2"})
	mirror := legitSlotPods(t, mirrorCh)[agent.PodUpgrade]
	waitPodPolicy(ctx, t, pods, mirror)
	resolved := channelOf(v1.UpdateChannelSpec{URL: "github-releases://o/r", Version: "v2"})
	resolved.Status.Resolved = &v1.ResolvedRelease{Version: "v2", Source: "https://github.example/o/r/releases", At: metav1.Now()}
	for name, ch := range map[string]*v1.UpdateChannel{"mirror channel": mirrorCh,
		"github channel with its token":                         channelOf(v1.UpdateChannelSpec{URL: "github-releases://o/r", Version: "v2", TokenSecretRef: &v1.SecretKeyRef{Name: "gh-token"}}),
		"github channel from its repository's download address": resolved,
		"mirror channel with the longest upgradeTimeout (a week)": channelOf(v1.UpdateChannelSpec{URL: "file:///srv/mirror", Version: "v2",
			UpgradeTimeout: &metav1.Duration{Duration: 7 * 24 * time.Hour}})} {
		for kind, p := range legitSlotPods(t, ch) {
			if _, err := pods.Create(ctx, p, dry); err != nil {
				t.Errorf("the agent's own %s Pod of a %s is refused: %v", kind, name, err)
			}
		}
	}
	jobs := legitJobs(t, mirrorCh)
	stage := legitSlotPods(t, mirrorCh)[agent.PodStage]
	replaced := func(p *corev1.Pod) func(*corev1.Pod) { return func(q *corev1.Pod) { *q = *p.DeepCopy() } }
	staging := func(change func(*corev1.Pod)) func(*corev1.Pod) {
		return func(q *corev1.Pod) { *q = *stage.DeepCopy(); change(q) }
	}
	attacks := map[string]func(*corev1.Pod){
		// Not a slot's: what stays a Job refused as a Pod.
		"of a pruning Job":                      replaced(podOfJob(jobs[agent.JobPrune])),
		"a staging Pod under an upgrade's name": func(p *corev1.Pod) { p.Annotations[protocol.AnnotationJobAction] = protocol.JobActionStage },
		"a staging Pod as an upgrade":           func(p *corev1.Pod) { c(&p.Spec).Args = append(c(&p.Spec).Args, "--phase", "stage") },
		// A staging run stages, and only on its own node: it may not swap.
		"a staging Pod that activates": staging(func(p *corev1.Pod) {
			args := c(&p.Spec).Args
			args[slices.Index(args, "--phase")+1] = "activate"
		}),
		"a staging Pod that upgrades whole (no --phase)": staging(func(p *corev1.Pod) {
			args := c(&p.Spec).Args
			i := slices.Index(args, "--phase")
			c(&p.Spec).Args = append(args[:i:i], args[i+2:]...)
		}),
		"a staging Pod for another node": staging(func(p *corev1.Pod) { p.Spec.NodeName = "node-b" }),
		// Its identity: every name, label and annotation a reader trusts is its own node's.
		"named for another node": func(p *corev1.Pod) {
			p.Name = protocol.JobName(protocol.JobKindUpgrade, "node-b", "v2", "abcdef", "1")
		},
		"named for a node whose name extends its own": func(p *corev1.Pod) {
			p.Name = protocol.JobName(protocol.JobKindUpgrade, "node-a-b", "v2", "abcdef", "1")
		},
		"named as a staging Job": func(p *corev1.Pod) { p.Name = protocol.JobName(protocol.JobKindStage, "node-a", "v2", "abcdef", "1") },
		"with a generated name": func(p *corev1.Pod) {
			p.Name, p.GenerateName = "", protocol.JobNamePrefix(protocol.JobKindUpgrade, "node-a")
		},
		"labelled for another node":  func(p *corev1.Pod) { p.Labels[protocol.LabelJobNode] = "node-b" },
		"annotated for another node": func(p *corev1.Pod) { p.Annotations[protocol.AnnotationJobNode] = "node-b" },
		"with a label drains leave alone": func(p *corev1.Pod) {
			p.Labels[protocol.LabelAppName] = protocol.ControllerApp
		},
		"with another annotation": func(p *corev1.Pod) { p.Annotations["example.com/x"] = "y" },
		// The server refuses an annotation that contradicts the field.
		"with AppArmor's annotation for another profile (not the field)": func(p *corev1.Pod) {
			c(&p.Spec).SecurityContext.AppArmorProfile = nil
			p.Annotations[corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+c(&p.Spec).Name] = "localhost/evil"
		},
		// Its owner and its end: readers trust a pod's controller, the
		// garbage collector deletes what an owner names, a finalizer pins.
		"owned by another node's Job": func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Controller: ptr.To(true),
				Name: protocol.JobName(protocol.JobKindUpgrade, "node-b", "v2", "abcdef", "1"), UID: "job-of-node-b"}}
		},
		"owned by its own Node": func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "node-a", UID: "node-a"}}
		},
		"with a finalizer":              func(p *corev1.Pod) { p.Finalizers = []string{"example.com/pin"} },
		"with no deadline":              func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = nil },
		"with a deadline beyond a week": func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr.To[int64](manifest.JobMaxDeadline + 1) },
		"as the agent's ServiceAccount": func(p *corev1.Pod) { p.Spec.ServiceAccountName = manifest.AgentName },
		"as the controller's (deprecated field)": func(p *corev1.Pod) {
			p.Spec.DeprecatedServiceAccount = manifest.ControllerName
		},
		"restarted on failure": func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyOnFailure },
	}
	for name, edit := range podSpecAttacks {
		attacks[name] = func(p *corev1.Pod) { edit(&p.Spec) }
	}
	for name, edit := range attacks {
		p := mirror.DeepCopy()
		edit(p)
		if why := refused(second(pods.Create(ctx, p, dry)), slotPodRefusal); why != "" {
			t.Errorf("a Pod %s: %s", name, why)
		}
	}
	if why := refused(second(asAgent.CoreV1().Pods("default").Create(ctx, mirror.DeepCopy(), dry)), ""); why != "" {
		t.Errorf("a Pod in another namespace: %s", why)
	}
}

// TestAgentDeletesOnlyItsOwnNodesSlotPods: the agent on node-a deletes its
// own node's slot Pods (a day after they finished), and no other pod:
// not node-b's slot Pod, not a Job's pod on its own node, not its own
// DaemonSet pod, not any pod of its node without the upgrade label.
func TestAgentDeletesOnlyItsOwnNodesSlotPods(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, asAgent := agentOnA(ctx, t)
	admin := kubernetes.NewForConfigOrDie(env.Config).CoreV1().Pods(agentOpts.Namespace)
	ch := channelOf(v1.UpdateChannelSpec{URL: "file:///srv/mirror", Version: "v2"})
	slotPodOn := func(node, suffix string) *corev1.Pod {
		pods, err := agent.SlotPods(agent.Options{NodeName: node, Image: agentOpts.Image, Namespace: agentOpts.Namespace}, ch,
			v1.Slot{Node: node, Version: "v2", Attempt: 1, Since: metav1.Now()})
		if err != nil {
			t.Fatal(err)
		}
		p := pods[agent.PodUpgrade]
		p.Name += suffix
		return p
	}
	own, theirs := slotPodOn("node-a", "-own"), slotPodOn("node-b", "-theirs")
	jobPod := slotPodOn("node-a", "-of-a-job") // a Job's pod: owned by its Job
	jobPod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "some-job", UID: "job-uid", Controller: ptr.To(true)}}
	unlabelled := slotPodOn("node-a", "-unlabelled")
	delete(unlabelled.Labels, protocol.LabelAppName)
	for _, p := range []*corev1.Pod{own, theirs, jobPod, unlabelled} {
		if _, err := admin.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = admin.Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		})
	}
	pods := asAgent.CoreV1().Pods(agentOpts.Namespace)
	dry := metav1.DeleteOptions{DryRun: dryRun}
	waitPolicy(t, slotPodDeleteRefusal, func() error { return pods.Delete(ctx, theirs.Name, dry) })
	if err := pods.Delete(ctx, own.Name, dry); err != nil {
		t.Errorf("the agent cannot delete its own node's slot Pod: %v", err)
	}
	for what, name := range map[string]string{
		"node-b's slot Pod":                           slotPodOn("node-b", "-theirs").Name,
		"a Job's pod on its own node":                 jobPod.Name,
		"a pod of its node without the upgrade label": unlabelled.Name,
		"its own DaemonSet pod":                       manifest.AgentName + "-node-a",
		"node-b's agent pod":                          manifest.AgentName + "-node-b",
	} {
		if why := refused(pods.Delete(ctx, name, dry), slotPodDeleteRefusal); why != "" {
			t.Errorf("the agent deleting %s: %s", what, why)
		}
	}
}
