package eds

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/gentype"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/kube"
)

// ensurePodTemplate keeps, as DataDog's controller does, a PodTemplate
// named after the ExtendedDaemonSet, labelled
// cluster-autoscaler.kubernetes.io/daemonset-pod=true and holding the
// spec's template: cluster-autoscaler counts it as a daemon pod of every
// node it simulates, so it neither scales up for nodes the daemon will not
// fit nor keeps nodes for it (the pods carry the annotation of the same
// name, so it does not count them as pods to move either). Written when
// the template hash changed; owned by the ExtendedDaemonSet.
func (c *Controller) ensurePodTemplate(ctx context.Context, r *round) error {
	e, hash := r.e, r.target.Spec.TemplateGeneration
	key := "podtemplate/" + string(e.UID)
	if c.lastWrote(key, hash) {
		return nil
	}
	api := gentype.NewClientWithList("podtemplates", c.kube.CoreV1().RESTClient(), kube.ParameterCodec, e.Namespace,
		func() *corev1.PodTemplate { return &corev1.PodTemplate{} }, func() *corev1.PodTemplateList { return &corev1.PodTemplateList{} })
	want := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: e.Name, Namespace: e.Namespace,
		Labels:          map[string]string{},
		Annotations:     map[string]string{v1.AnnotationTemplateHash: hash},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(e, v1.SchemeGroupVersion.WithKind("ExtendedDaemonSet"))}},
		Template: *e.Spec.Template.DeepCopy()}
	maps.Copy(want.Labels, e.Labels)
	want.Labels[v1.AnnotationAutoscalerDaemonSetPod] = "true"
	got, err := api.Get(ctx, e.Name, metav1.GetOptions{})
	if err == nil && metav1.GetControllerOf(got) == nil && got.DeletionTimestamp == nil { // orphaned (--cascade=orphan): adopt it
		if err = c.canAdopt(ctx, r); err == nil { // an update: the resourceVersion pins the object read (the manifest grants no patch)
			got.OwnerReferences = append(got.OwnerReferences, *metav1.NewControllerRef(e, v1.SchemeGroupVersion.WithKind("ExtendedDaemonSet")))
			got, err = api.Update(ctx, got, metav1.UpdateOptions{})
		}
	}
	switch {
	case apierrors.IsNotFound(err):
		_, err = api.Create(ctx, want, metav1.CreateOptions{})
	case err != nil:
	case !metav1.IsControlledBy(got, e):
		err = fmt.Errorf("the PodTemplate %s/%s is not this ExtendedDaemonSet's: delete it, the controller writes its own for cluster-autoscaler", e.Namespace, e.Name)
	case got.Annotations[v1.AnnotationTemplateHash] == hash:
	default:
		want.ResourceVersion = got.ResourceVersion
		_, err = api.Update(ctx, want, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("write the PodTemplate for cluster-autoscaler: %w", err)
	}
	c.remember(key, hash)
	return nil
}
