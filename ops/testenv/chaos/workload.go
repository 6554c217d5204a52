package chaos

import (
	"context"
	"fmt"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"slipway.dev/slipway/ops/testenv/monitor"
)

// guardedWorkload is a 3-replica Deployment with a PodDisruptionBudget
// (default/guarded, minAvailable 2) that the drains must respect and the
// BlockEviction faults close for a while.
func guardedWorkload(ctx context.Context, kc kubernetes.Interface) error {
	labels := map[string]string{"app": "guarded"}
	r := int32(3)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &r, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "guarded", Image: "guarded:1"}}}}}}
	if _, err := kc.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the guarded Deployment: %w", err)
	}
	two := intstr.FromInt32(2)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &two, Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if _, err := kc.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the guarded PDB: %w", err)
	}
	return nil
}

// writeViolations writes the violations as JSON lines.
func writeViolations(path string, vs []monitor.Violation) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, v := range vs {
		if err := monitor.WriteJSON(f, v); err != nil {
			return err
		}
	}
	return nil
}
