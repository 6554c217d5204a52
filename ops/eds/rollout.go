package eds

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/eds/plan"
)

// rollout plans and performs one step: pods on nodes no longer eligible go
// at once; then the planner's creations and deletions.
func (c *Controller) rollout(ctx context.Context, r *round) error {
	key := r.e.Namespace + "/" + r.e.Name
	c.observe(key, r.pods)
	overrides := c.overrides(ctx, r)
	states, stray := c.nodeStates(r, overrides)
	limits, err := rollingOf(&r.e.Spec.Strategy.RollingUpdate).limits(len(r.nodes), r.now.Sub(r.active.CreationTimestamp.Time))
	if err != nil {
		return err
	}
	limits.Paused = isTrue(r.e.Annotations, v1.AnnotationRollingUpdatePaused) || r.verdict.Action == plan.Pause
	limits.Frozen = isTrue(r.e.Annotations, v1.AnnotationRolloutFrozen)
	p := plan.Rollout(states, limits)
	var create []string
	for _, node := range p.Create { // nodes whose pods keep failing wait, doubling each time
		if wait := c.failureBackoff(key, node); wait > 0 {
			r.later(wait)
			continue
		}
		create = append(create, node)
	}
	p.Create = create
	r.plan = p
	if err := parallel(stray, func(pod *corev1.Pod) error { return c.deletePod(ctx, key, pod.Namespace, pod.Name) }); err != nil {
		return err
	}
	if err := c.deleteOutdated(ctx, r, p.Delete); err != nil {
		return err
	}
	ers := map[string]*v1.ExtendedDaemonSetReplicaSet{}
	for _, s := range r.ersList {
		ers[s.Name] = s
	}
	return parallel(p.Create, func(node string) error {
		s := ers[r.targets[node]]
		if s == nil { // never a nil template: say which ERS is missing
			return fmt.Errorf("ERS %s of node %s is not in the cache yet; retrying", r.targets[node], node)
		}
		pod := buildPod(r.e, s, node, overrides[node], r.canary != nil && s.Name == r.canary.Name)
		if _, err := c.kube.CoreV1().Pods(r.e.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			c.recorder.Eventf(r.e, corev1.EventTypeWarning, EventCreateFailed, "create the pod of node %s: %v", node, err)
			return fmt.Errorf("create the pod of ERS %s on node %s: %w", s.Name, node, err)
		}
		c.expect(key, "create/"+node)
		c.metrics.actions.WithLabelValues("create").Inc()
		return nil
	})
}

// deleteOutdated deletes the planned pods: the EDS's own directly, the old
// DaemonSet's by moving their nodes out of its reach.
func (c *Controller) deleteOutdated(ctx context.Context, r *round, names []string) error {
	key := r.e.Namespace + "/" + r.e.Name
	var own []string
	var oldNodes []string
	byName := map[string]*corev1.Pod{}
	for _, p := range r.pods {
		byName[p.Name] = p
	}
	for _, n := range names {
		if p := byName[n]; p != nil && p.Labels[v1.LabelName] != r.e.Name {
			oldNodes = append(oldNodes, nodeOf(p))
			c.expect(key, "delete/"+n)
			continue
		}
		own = append(own, n)
	}
	if err := parallel(own, func(n string) error { return c.deletePod(ctx, key, r.e.Namespace, n) }); err != nil {
		return err
	}
	if len(oldNodes) == 0 {
		return nil
	}
	return c.releaseFromDaemonSet(ctx, r, oldNodes)
}

// buildPod is the pod of ERS s on node: the template, pinned to the node by
// required node affinity on metadata.name (so the scheduler still checks
// its resources), with the daemon tolerations and the node's overrides.
func buildPod(e *v1.ExtendedDaemonSet, s *v1.ExtendedDaemonSetReplicaSet, node string, o override, canary bool) *corev1.Pod {
	t := s.Spec.Template.DeepCopy()
	pod := &corev1.Pod{ObjectMeta: *t.ObjectMeta.DeepCopy(), Spec: t.Spec}
	pod.Name, pod.Namespace, pod.GenerateName = "", e.Namespace, s.Name+"-"
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Labels[v1.LabelName], pod.Labels[v1.DataDogLabelName] = e.Name, e.Name
	pod.Labels[v1.LabelReplicaSet], pod.Labels[v1.DataDogLabelReplicaSet] = s.Name, s.Name
	if canary {
		pod.Labels[v1.LabelCanary], pod.Labels[v1.DataDogLabelCanary] = "true", "true"
	}
	if o.setting != "" { // DataDog's labels naming the setting whose resources the pod got
		pod.Labels[v1.DataDogLabelSettingName], pod.Labels[v1.DataDogLabelSettingNamespace] = o.setting, e.Namespace
	}
	pod.Annotations[v1.AnnotationAutoscalerDaemonSetPod] = "true"
	pod.Annotations[v1.AnnotationTemplateHash] = s.Spec.TemplateGeneration
	pod.Annotations[v1.AnnotationNodeHash] = o.hash
	pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(s, v1.SchemeGroupVersion.WithKind("ExtendedDaemonSetReplicaSet"))}
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	if pod.Spec.Affinity.NodeAffinity == nil {
		pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}
	for _, tol := range plan.DaemonTolerations() {
		if !slices.ContainsFunc(pod.Spec.Tolerations, func(x corev1.Toleration) bool { return x.MatchToleration(&tol) }) {
			pod.Spec.Tolerations = append(pod.Spec.Tolerations, tol)
		}
	}
	for i := range pod.Spec.Containers {
		if res, ok := o.containers[pod.Spec.Containers[i].Name]; ok {
			pod.Spec.Containers[i].Resources = res
		}
	}
	return pod
}

func isTrue(m map[string]string, key string) bool {
	v, _ := annotation(m, key)
	return v == "true"
}
