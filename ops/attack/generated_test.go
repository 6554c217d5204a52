package attack

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"slipway.dev/slipway/ops/agent"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/attack/mutate"
	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/protocol"
)

// The generated attacks: every object the UpdateChannel agent and
// controller create or write (each kind of Job and slot Pod, each Node write, the
// Leases; the slot reports are Node annotations), mutated field by field
// (ops/attack/mutate), each mutation submitted as a dry run with the
// component's real bound token. Every admitted mutation must be one the
// canonical shape allows (a hole) or one the server drops.

// fast is cfg with client-side rate limits out of the way (the mutations
// go in parallel).
func fast(cfg *rest.Config) kubernetes.Interface {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 500, 1000
	return kubernetes.NewForConfigOrDie(cfg)
}

var dryRun = []string{metav1.DryRunAll}

// jobHoles are the paths of a Job that differ between two legitimate
// Jobs of one kind: the name after the node's prefix, the owner
// annotations, the channel label, the deadline, and its pod's (podHoles).
func jobHoles(j *batchv1.Job) mutate.Holes {
	return append(mutate.Holes{"metadata.name", "metadata.annotations[ops.slipway.dev/*]", "metadata.labels[" + protocol.LabelJobChannel + "]",
		"spec.activeDeadlineSeconds",
		// The policy pins these to their defaults; written out, they change nothing.
		"spec.parallelism", "spec.completions"}, podHoles("spec.template.", j.Spec.Template.Spec.Containers[0].Args)...)
}

// slotPodHoles are the paths of a slot Pod that differ between two
// legitimate slot Pods of one kind: those of its Job (the Job's deadline
// on the Pod itself).
func slotPodHoles(p *corev1.Pod) mutate.Holes {
	return append(mutate.Holes{"metadata.name", "spec.activeDeadlineSeconds"}, podHoles("", p.Spec.Containers[0].Args)...)
}

// podHoles are the paths of a Job's pod (at "spec.template.") or a slot
// Pod (at "") that differ between two legitimate ones: the owner
// annotations, the channel label, the values of the arguments args
// (version, source, keep, from, the component switches), the token
// Secret's key, and fewer capabilities.
func podHoles(at string, args []string) mutate.Holes {
	h := mutate.Holes{at + "metadata.annotations[ops.slipway.dev/*]", at + "metadata.labels[" + protocol.LabelJobChannel + "]",
		at + "spec.containers[0].env[*].valueFrom.secretKeyRef.key", at + "spec.containers[0].securityContext.capabilities.add",
		// The policy pins it to its default; written out, it changes nothing.
		at + "spec.enableServiceLinks",
		// A channel without a token Secret has no GITHUB_TOKEN.
		at + "spec.containers[0].env"}
	for i, a := range args {
		valueOf := i > 0 && slices.Contains([]string{"--version", "--source", "--keep", "--from", "--phase"}, args[i-1])
		if valueOf || strings.HasPrefix(a, "--rootfs=") || strings.HasPrefix(a, "--kernel=") || strings.HasPrefix(a, "--k3s=") {
			h = append(h, fmt.Sprintf("%sspec.containers[0].args[%d]", at, i))
		}
	}
	return h
}

// jobNormalize drops what the API server derives from the Job's UID.
func jobNormalize(u map[string]any) {
	spec, _ := u["spec"].(map[string]any)
	delete(spec, "selector")
	tmpl, _ := spec["template"].(map[string]any)
	md, _ := tmpl["metadata"].(map[string]any)
	if labels, ok := md["labels"].(map[string]any); ok {
		for _, k := range []string{"batch.kubernetes.io/controller-uid", "controller-uid"} {
			delete(labels, k)
		}
	}
}

// TestGeneratedAttacks runs the generator on each object the agent (on
// node-a) and the controller write, and fails on any mutation admitted
// that is neither a hole nor dropped by the server.
func TestGeneratedAttacks(t *testing.T) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	agentCfg, _ := agentOnA(ctx, t)
	asAgent := fast(agentCfg)
	asController := fast(podOn(ctx, t, agentOpts.Namespace, manifest.ControllerName, "node-cp"))
	admin := kubernetes.NewForConfigOrDie(env.Config)
	ns := agentOpts.Namespace
	jobs := asAgent.BatchV1().Jobs(ns)
	waitPolicy(t, "upgrade Jobs", func() error {
		j := legitJob(t, channelOf(v1.UpdateChannelSpec{URL: "file:///srv/mirror", Version: "v2"}))
		j.Spec.Template.Spec.NodeName = "node-b"
		_, err := jobs.Create(ctx, j, metav1.CreateOptions{DryRun: dryRun})
		return err
	})

	var targets []mutate.Target
	for chName, ch := range map[string]*v1.UpdateChannel{
		"mirror": channelOf(v1.UpdateChannelSpec{URL: "file:///srv/mirror", Version: "v2"}),
		"github": channelOf(v1.UpdateChannelSpec{URL: "github-releases://o/r", Version: "v2", TokenSecretRef: &v1.SecretKeyRef{Name: "gh-token"}}),
	} {
		for kind, j := range legitJobs(t, ch) {
			if chName == "github" && kind != "upgrade" {
				continue // the other kinds differ from the mirror's only where the upgrade does
			}
			targets = append(targets, mutate.Target{Component: "ops agent", Object: kind + " Job (" + chName + " channel)", Base: j, Holes: jobHoles(j),
				Options: mutate.Options{KeyPrefixes: []string{"ops.slipway.dev/", "app.kubernetes.io/"}}, Normalize: jobNormalize,
				Submit: func(ctx context.Context, obj any) (any, error) {
					return jobs.Create(ctx, obj.(*batchv1.Job), metav1.CreateOptions{DryRun: dryRun})
				}})
		}
	}
	pods := asAgent.CoreV1().Pods(ns)
	waitPodPolicy(ctx, t, pods, legitSlotPods(t, channelOf(v1.UpdateChannelSpec{URL: "file:///srv/mirror", Version: "v2"}))[agent.PodUpgrade])
	for kind, p := range legitSlotPods(t, channelOf(v1.UpdateChannelSpec{URL: "file:///srv/mirror", Version: "v2"})) {
		targets = append(targets, mutate.Target{Component: "ops agent", Object: kind + " slot Pod (mirror channel)", Base: p, Holes: slotPodHoles(p),
			Options: mutate.Options{KeyPrefixes: []string{"ops.slipway.dev/", "app.kubernetes.io/"}},
			Submit: func(ctx context.Context, obj any) (any, error) {
				return pods.Create(ctx, obj.(*corev1.Pod), metav1.CreateOptions{DryRun: dryRun})
			}})
	}
	// The Node writes are patches (RBAC grants patch, not update): the
	// strategic merge patch from the Node to its mutation (nodePatchOf).
	nodeOptions := mutate.Options{KeyPrefixes: []string{"ops.slipway.dev/", "drain.slipway.dev/", "channel.ops.slipway.dev/", "node-role.kubernetes.io/"}}
	for _, node := range []string{"node-a", "node-b"} {
		n, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Annotations[protocol.AnnotationSlotReport] = `{}` // a report to mutate (the agent's own)
		n.Annotations[protocol.ViewKey("uid-1")] = `{"name":"c"}`
		if n, err = admin.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if node == "node-a" {
			targets = append(targets, mutate.Target{Component: "ops agent", Object: "its own Node", Base: n, Options: nodeOptions, Submit: nodePatchOf(t, asAgent, n),
				Holes: mutate.Holes{"metadata.labels[ops.slipway.dev/*]", "metadata.annotations[ops.slipway.dev/*]", "metadata.annotations[drain.slipway.dev/*]", "spec.unschedulable"}})
		}
		targets = append(targets, mutate.Target{Component: "ops controller", Object: "a Node (" + node + ")", Base: n, Options: nodeOptions, Submit: nodePatchOf(t, asController, n),
			Holes: mutate.Holes{"metadata.annotations[channel.ops.slipway.dev/*]", "metadata.annotations[drain.slipway.dev/*]", "spec.unschedulable"}})
	}
	lease := func(name, holder string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](180), RenewTime: ptr.To(metav1.NowMicro())}}
		got, err := admin.CoordinationV1().Leases(ns).Create(ctx, l, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			got, err = admin.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	leaseUpdate := func(c kubernetes.Interface) func(context.Context, any) (any, error) {
		return func(ctx context.Context, obj any) (any, error) {
			return c.CoordinationV1().Leases(ns).Update(ctx, obj.(*coordinationv1.Lease), metav1.UpdateOptions{DryRun: dryRun})
		}
	}
	leaseHoles := mutate.Holes{"spec.renewTime", "spec.acquireTime", "spec.leaseDurationSeconds", "spec.leaseTransitions", "spec.strategy", "spec.preferredHolder",
		"metadata.labels[*]", "metadata.annotations[*]"}
	targets = append(targets,
		mutate.Target{Component: "ops agent", Object: "its heartbeat Lease", Base: lease(protocol.AgentLeaseName("node-a"), "node-a"), Holes: leaseHoles, Submit: leaseUpdate(asAgent)},
		// The election: replicas take it from one another (the holder is a hole).
		mutate.Target{Component: "ops controller", Object: "its election Lease", Base: lease(manifest.ControllerLease, "controller-0"),
			Holes: append(slices.Clone(leaseHoles), "spec.holderIdentity"), Submit: leaseUpdate(asController)})

	logReports(t, start, runTargets(ctx, t, targets...))
}
