package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	edsv1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/eds"
	edsversioned "slipway.dev/slipway/ops/generated/eds/clientset/versioned"
	"slipway.dev/slipway/ops/testenv/faults"
	"slipway.dev/slipway/ops/testenv/monitor"
)

// The ExtendedDaemonSet system: two `slipway eds controller --leader-elect`
// replicas, each behind its own proxy and with the token of the manifest's
// ServiceAccount, roll an ExtendedDaemonSet over the fake nodes (kwok runs
// its pods) through a one-node canary at maxUnavailable 1: three template
// changes, at the start of the faults and at a third and two thirds of
// their span, so that the faults meet canaries and rolling updates. It has
// settled when every node runs one Ready pod of the last template and the
// state is Running.

const (
	edsNS       = "slipway-system" // the controller's namespace (its Lease)
	edsName     = "agent"          // the ExtendedDaemonSet, in namespace default
	edsMaxUnav  = 1
	edsCanaryFo = 3 * time.Second
)

// edsImages are the templates a run rolls out, in turn.
var edsImages = []string{"agent:v1", "agent:v2", "agent:v3", "agent:v4"}

type edsSystem struct {
	nodes int
	ec    edsversioned.Interface
	kc    kubernetes.Interface
	// variant picks a named schedule's setup (edsVariants).
	variant string
	// want is the image every node must run at the end, and the state.
	want      string
	wantState edsv1.ExtendedDaemonSetStatusState
	// cancel ends the variant's steps with the run.
	cancel context.CancelFunc
}

func (s *edsSystem) stop() {
	if s.cancel != nil {
		s.cancel()
	}
}

func runEDS(ctx context.Context, o Options) (Result, error) {
	if o.Settle <= 0 {
		o.Settle = 2 * time.Minute
	}
	return runSystem(ctx, o, &edsSystem{nodes: o.Nodes, variant: o.Variant})
}

// edsSpec: the controllers (kill, pause, every network fault) and the
// nodes (NotReady, registered again).
func edsSpec(o Options, nodes []string) faults.Spec {
	procs := slices.Clone(controllers)
	var nodeTargets []string
	for _, n := range nodes {
		nodeTargets = append(nodeTargets, "node/"+n)
	}
	return faults.Spec{Duration: o.Duration, Gap: 1500 * time.Millisecond, MaxFor: 8 * time.Second, Targets: map[faults.Kind][]string{
		faults.Kill: procs, faults.Pause: procs, faults.Latency: procs, faults.HalfOpen: procs, faults.Partition: procs, faults.Drop: procs,
		faults.NotReady: nodeTargets, faults.Reregister: nodeTargets,
	}, Weights: map[faults.Kind]int{
		faults.Kill: 4, faults.Pause: 3, faults.Latency: 2, faults.HalfOpen: 2, faults.Partition: 2, faults.Drop: 2,
		faults.NotReady: 2, faults.Reregister: 1,
	}}
}

func (*edsSystem) spec(o Options, nodes []string) faults.Spec { return edsSpec(o, nodes) }

func (*edsSystem) limits() monitor.Limits { return monitor.Limits{} }

// nodeCommand: no node process; kwok runs the pods.
func (*edsSystem) nodeCommand(*harness) ([]string, []string, error) { return nil, nil, nil }

func (s *edsSystem) setup(ctx context.Context, h *harness, kc kubernetes.Interface) error {
	objs, err := eds.ManifestObjects(eds.ManifestOptions{Namespace: edsNS, Image: "slipway:chaos"})
	if err != nil {
		return err
	}
	if err := applyAccess(ctx, kc, objs); err != nil {
		return err
	}
	for _, c := range controllers {
		if err := tokenKubeconfig(ctx, kc, h.admin, edsNS, "slipway-eds-controller", h.kubeconfig(c), "https://"+h.proxies[c].Addr()); err != nil {
			return err
		}
		if err := h.startProc(c, filepath.Join(h.o.Bin, "slipway"), "eds", "--kubeconfig", h.kubeconfig(c), "controller",
			"--leader-elect", "--lease-namespace", edsNS, "--identity", strings.ReplaceAll(c, "/", "-"), "--metrics-addr", ""); err != nil {
			return err
		}
	}
	return nil
}

// edsObject is the ExtendedDaemonSet of a run at image.
func edsObject(image string) *edsv1.ExtendedDaemonSet {
	mu := intstr.FromInt32(edsMaxUnav)
	one := intstr.FromInt32(1)
	return &edsv1.ExtendedDaemonSet{ObjectMeta: metav1.ObjectMeta{Name: edsName, Namespace: "default"},
		Spec: edsv1.ExtendedDaemonSetSpec{
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": edsName}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "daemon", Image: image}}}},
			Strategy: edsv1.ExtendedDaemonSetSpecStrategy{
				RollingUpdate: edsv1.ExtendedDaemonSetSpecStrategyRollingUpdate{MaxUnavailable: &mu},
				Canary: &edsv1.ExtendedDaemonSetSpecStrategyCanary{Replicas: &one,
					Duration: &metav1.Duration{Duration: edsCanaryFo}, NoRestartsDuration: &metav1.Duration{Duration: edsCanaryFo}},
				ReconcileFrequency: &metav1.Duration{Duration: 10 * time.Second},
			}}}
}

// start creates the ExtendedDaemonSet at v1, waits until it runs on every
// node, then starts the variant's changes.
func (s *edsSystem) start(ctx context.Context, h *harness) error {
	var err error
	if s.ec, err = edsversioned.NewForConfig(h.env.Config); err != nil {
		return err
	}
	if s.kc, err = kubernetes.NewForConfig(h.env.Config); err != nil {
		return err
	}
	v, ok := edsVariants[s.variant]
	if !ok {
		return fmt.Errorf("eds: unknown variant %q", s.variant)
	}
	e := edsObject(edsImages[0])
	if v.edit != nil {
		v.edit(e)
	}
	if _, err := s.ec.EdsV1alpha1().ExtendedDaemonSets("default").Create(ctx, e, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the ExtendedDaemonSet: %w", err)
	}
	if err := s.wait(ctx, 3*time.Minute, edsImages[0], edsv1.StateRunning); err != nil {
		return fmt.Errorf("v1 on every node: %w", err)
	}
	ctx, s.cancel = context.WithCancel(ctx)
	return v.start(ctx, s, h)
}

// edsVariant is the setup of one EDS run: the default rolls three
// templates; the named schedules' variants reproduce a review's case.
type edsVariant struct {
	edit  func(*edsv1.ExtendedDaemonSet)
	start func(ctx context.Context, s *edsSystem, h *harness) error
}

var edsVariants = map[string]edsVariant{
	"": {start: func(ctx context.Context, s *edsSystem, h *harness) error {
		s.want, s.wantState = edsImages[3], edsv1.StateRunning
		if err := s.setImage(ctx, edsImages[1]); err != nil {
			return err
		}
		go func() { // two more changes within the faults' span, often mid-rollout
			for i, img := range edsImages[2:] {
				select {
				case <-ctx.Done():
					return
				case <-time.After(h.o.Duration / 3):
				}
				if err := s.setImage(ctx, img); err != nil {
					h.logf("template %d: %v", i+3, err)
				}
			}
		}()
		return nil
	}},
}

func init() {
	// canary.replicas 0: a canary on no node, validated by time (a timed
	// hold), then the rolling update; v2 must reach every node.
	edsVariants["canary-zero"] = edsVariant{
		edit: func(e *edsv1.ExtendedDaemonSet) {
			zero := intstr.FromString("0%")
			e.Spec.Strategy.Canary.Replicas = &zero
		},
		start: func(ctx context.Context, s *edsSystem, _ *harness) error {
			s.want, s.wantState = edsImages[1], edsv1.StateRunning
			return s.setImage(ctx, edsImages[1])
		}}
	// The canary's node leaves (deleted, never back) after its pod
	// restarted once: the canary is judged on its nodes still there and
	// validated; v2 must reach every node left.
	edsVariants["canary-node-leaves"] = edsVariant{
		start: func(ctx context.Context, s *edsSystem, h *harness) error {
			s.want, s.wantState = edsImages[1], edsv1.StateRunning
			if err := s.setImage(ctx, edsImages[1]); err != nil {
				return err
			}
			e, err := s.waitCanary(ctx)
			if err != nil {
				return err
			}
			pod, err := s.canaryPod(ctx, e.Status.Canary.ReplicaSet)
			if err != nil {
				return err
			}
			if err := s.restarted(ctx, pod); err != nil {
				return err
			}
			h.logf("canary pod %s on %s restarted once; its node leaves", pod.Name, pod.Spec.NodeName)
			if err := s.kc.CoreV1().Nodes().Delete(ctx, pod.Spec.NodeName, metav1.DeleteOptions{}); err != nil {
				return fmt.Errorf("delete the canary's node: %w", err)
			}
			return nil
		}}
	// A manual canary failed while an admission policy refuses the
	// active template (v1) the controller restores: it must back off (no
	// hot loop, bounded-write-requests) and restore v1 once the policy is
	// lifted, 20 s later.
	edsVariants["refused-restore"] = edsVariant{
		edit: func(e *edsv1.ExtendedDaemonSet) {
			e.Spec.Strategy.Canary.Duration, e.Spec.Strategy.Canary.NoRestartsDuration = nil, nil
			e.Spec.Strategy.Canary.ValidationMode = edsv1.ValidationModeManual
		},
		start: func(ctx context.Context, s *edsSystem, h *harness) error {
			s.want, s.wantState = edsImages[0], edsv1.StateCanaryFailed
			if err := s.setImage(ctx, edsImages[1]); err != nil {
				return err
			}
			e, err := s.waitCanary(ctx)
			if err != nil {
				return err
			}
			unbind, err := s.withdrawImage(ctx, edsImages[0])
			if err != nil {
				return err
			}
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, edsv1.AnnotationCanaryFailed, e.Status.Canary.ReplicaSet)
			if _, err := s.ec.EdsV1alpha1().ExtendedDaemonSets("default").Patch(ctx, edsName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("fail the canary: %w", err)
			}
			h.logf("canary %s failed while a policy refuses %s", e.Status.Canary.ReplicaSet, edsImages[0])
			go func() {
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Second):
					unbind()
					h.logf("the policy refusing %s lifted", edsImages[0])
				}
			}()
			return nil
		}}
}

// waitCanary waits until the ExtendedDaemonSet runs a canary.
func (s *edsSystem) waitCanary(ctx context.Context) (*edsv1.ExtendedDaemonSet, error) {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		e, err := s.ec.EdsV1alpha1().ExtendedDaemonSets("default").Get(ctx, edsName, metav1.GetOptions{})
		if err == nil && e.Status.State == edsv1.StateCanary && e.Status.Canary != nil {
			return e, nil
		}
	}
	return nil, fmt.Errorf("no canary within a minute")
}

// canaryPod is the first pod of replica set ers on a node, Ready.
func (s *edsSystem) canaryPod(ctx context.Context, ers string) (*corev1.Pod, error) {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		pods, err := s.kc.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: edsv1.LabelReplicaSet + "=" + ers})
		if err != nil {
			continue
		}
		for i := range pods.Items {
			if p := &pods.Items[i]; p.Spec.NodeName != "" && podReady(p) {
				return p, nil
			}
		}
	}
	return nil, fmt.Errorf("no Ready pod of the canary %s within a minute", ers)
}

// restarted makes the pod's container report one restart, as a kubelet
// does after a crash, and waits until the canary's replica set recorded it.
func (s *edsSystem) restarted(ctx context.Context, pod *corev1.Pod) error {
	now := time.Now().UTC().Format(time.RFC3339)
	status := map[string]any{"status": map[string]any{
		"conditions": []map[string]any{{"type": "Ready", "status": "False", "lastTransitionTime": now}},
		"containerStatuses": []map[string]any{{"name": "daemon", "image": "x", "imageID": "", "ready": false, "restartCount": 1,
			"state":     map[string]any{"waiting": map[string]any{"reason": "CrashLoopBackOff"}},
			"lastState": map[string]any{"terminated": map[string]any{"exitCode": 1, "reason": "Error", "finishedAt": now}}}},
	}}
	b, _ := json.Marshal(status)
	if _, err := s.kc.CoreV1().Pods("default").Patch(ctx, pod.Name, types.MergePatchType, b, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("restart the canary pod: %w", err)
	}
	ers := pod.Labels[edsv1.LabelReplicaSet]
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		r, err := s.ec.EdsV1alpha1().ExtendedDaemonSetReplicaSets("default").Get(ctx, ers, metav1.GetOptions{})
		if err == nil && len(r.Status.CanaryRestarts) > 0 {
			return nil
		}
	}
	return fmt.Errorf("the canary's restart never recorded in %s", ers)
}

// withdrawImage installs a ValidatingAdmissionPolicy refusing (422, as a
// site policy may) any update of an ExtendedDaemonSet of namespace default
// whose template runs image; unbind lifts it.
func (s *edsSystem) withdrawImage(ctx context.Context, image string) (unbind func(), err error) {
	name := "chaos-withdraw"
	fail := admissionv1.Fail
	invalid := metav1.StatusReasonInvalid
	policy := &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{Operations: []admissionv1.OperationType{admissionv1.Update},
					Rule: admissionv1.Rule{APIGroups: []string{edsv1.SchemeGroupVersion.Group}, APIVersions: []string{"*"}, Resources: []string{"extendeddaemonsets"}}}}}},
			Validations: []admissionv1.Validation{{Expression: fmt.Sprintf("object.spec.template.spec.containers.all(c, c.image != %q)", image),
				Message: image + " is withdrawn by the site policy", Reason: &invalid}}}}
	api := s.kc.AdmissionregistrationV1()
	if _, err := api.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create the policy withdrawing %s: %w", image, err)
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			MatchResources: &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": "default"}}}}}
	if _, err := api.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("bind the policy withdrawing %s: %w", image, err)
	}
	unbind = func() {
		_ = api.ValidatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	}
	// In force once a dry run of the restore is refused.
	patch := []byte(fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"daemon","image":%q}]}}}}`, image))
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		_, err := s.ec.EdsV1alpha1().ExtendedDaemonSets("default").Patch(ctx, edsName, types.MergePatchType, patch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), "withdrawn") {
			return unbind, nil
		}
	}
	return unbind, fmt.Errorf("the policy withdrawing %s not in force within a minute", image)
}

// setImage changes the template's image.
func (s *edsSystem) setImage(ctx context.Context, image string) error {
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
		"containers": []map[string]any{{"name": "daemon", "image": image}}}}}})
	if _, err := s.ec.EdsV1alpha1().ExtendedDaemonSets("default").Patch(ctx, edsName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("set the template's image to %s: %w", image, err)
	}
	return nil
}

func (s *edsSystem) wait(ctx context.Context, timeout time.Duration, image string, state edsv1.ExtendedDaemonSetStatusState) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := ""
	for {
		ok, out := s.rolledOut(ctx, image, state)
		if ok {
			return nil
		}
		last = out
		select {
		case <-ctx.Done():
			return fmt.Errorf("not within %s: %s", timeout, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// rolledOut: every node runs exactly one pod of the ExtendedDaemonSet, Ready,
// not terminating, running image, and the state is state.
func (s *edsSystem) rolledOut(ctx context.Context, image string, state edsv1.ExtendedDaemonSetStatusState) (bool, string) {
	e, err := s.ec.EdsV1alpha1().ExtendedDaemonSets("default").Get(ctx, edsName, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	nodes, err := s.kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err.Error()
	}
	pods, err := s.kc.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: edsv1.LabelName + "=" + edsName})
	if err != nil {
		return false, err.Error()
	}
	on := map[string][]string{}
	var wrong []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Spec.NodeName == "" {
			wrong = append(wrong, p.Name+" terminating or unscheduled")
			continue
		}
		on[p.Spec.NodeName] = append(on[p.Spec.NodeName], p.Name)
		if p.Spec.Containers[0].Image != image || !podReady(&p) {
			wrong = append(wrong, fmt.Sprintf("%s on %s runs %s ready %t", p.Name, p.Spec.NodeName, p.Spec.Containers[0].Image, podReady(&p)))
		}
	}
	for _, n := range nodes.Items {
		if len(on[n.Name]) != 1 {
			wrong = append(wrong, fmt.Sprintf("node %s has %d pods", n.Name, len(on[n.Name])))
		}
	}
	out := fmt.Sprintf("state %s (%s), image %s, %d pods on %d nodes", e.Status.State, e.Status.Reason, e.Spec.Template.Spec.Containers[0].Image, len(pods.Items), len(nodes.Items))
	if len(wrong) > 0 {
		out += "; " + strings.Join(wrong, "; ")
	}
	return len(wrong) == 0 && e.Status.State == state && e.Status.ObservedGeneration == e.Generation, out
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (s *edsSystem) settled(ctx context.Context, _ *harness) (bool, string) {
	return s.rolledOut(ctx, s.want, s.wantState)
}
