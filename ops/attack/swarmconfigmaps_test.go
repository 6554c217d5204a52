package attack

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	swarmmanifest "slipway.dev/slipway/ops/swarm/manifest"
	"slipway.dev/slipway/ops/testenv"
)

// TestSwarmControllerWritesOnlyItsSwarmsConfigMaps: the swarm controller's
// token, which RBAC lets create and update every ConfigMap of its
// namespace, rewrites only the workers' ConfigMaps of its Swarms. A
// Swarm's job list (spec.jobsFrom) and any other component's ConfigMap in
// the namespace are refused to it, as are a ConfigMap created without its
// Swarm as owner, and a workers' ConfigMap moved to another Swarm.
func TestSwarmControllerWritesOnlyItsSwarmsConfigMaps(t *testing.T) {
	e := testenv.Need(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "swarm-cm"
	admin := kubernetes.NewForConfigOrDie(e.Config)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	apply(ctx, t, e.Config, append(swarmmanifest.RBAC(ns), swarmmanifest.ControllerAdmission(ns)...))
	asController := kubernetes.NewForConfigOrDie(podOn(ctx, t, ns, swarmmanifest.ControllerName, "swcm-node"))
	owner := metav1.OwnerReference{APIVersion: swarmv1.SchemeGroupVersion.String(), Kind: "Swarm", Name: "web", UID: types.UID("6b1c1f3e-0000-4000-8000-000000000001"),
		Controller: new(bool), BlockOwnerDeletion: new(bool)}
	*owner.Controller, *owner.BlockOwnerDeletion = true, true
	workers := func(name, swarm string) *corev1.ConfigMap {
		o := owner
		o.Name = swarm
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{swarmv1.SwarmLabel: swarm},
			OwnerReferences: []metav1.OwnerReference{o}}, Data: map[string]string{swarmv1.ConfigMapKey: "version: 1\n"}}
	}
	others := []*corev1.ConfigMap{
		{ObjectMeta: metav1.ObjectMeta{Name: "web-jobs", Namespace: ns}, Data: map[string]string{"jobs": "a\nb\n"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "someone-elses", Namespace: ns, Labels: map[string]string{"app": "other"}}, Data: map[string]string{"k": "v"}},
		workers("web"+swarmv1.ConfigMapSuffix, "web"),
	}
	for _, cm := range others {
		if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	cms := asController.CoreV1().ConfigMaps(ns)
	dry := metav1.CreateOptions{DryRun: dryRun}
	waitPolicy(t, "workers' ConfigMaps", func() error {
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns}}, dry)
		return err
	})
	if _, err := cms.Create(ctx, workers("api"+swarmv1.ConfigMapSuffix, "api"), dry); err != nil {
		t.Errorf("the controller cannot create a Swarm's workers' ConfigMap: %v", err)
	}
	own, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "web"+swarmv1.ConfigMapSuffix, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	own.Data[swarmv1.ConfigMapKey] = "version: 2\n"
	if _, err := cms.Update(ctx, own, metav1.UpdateOptions{DryRun: dryRun}); err != nil {
		t.Errorf("the controller cannot update its Swarm's workers' ConfigMap: %v", err)
	}
	for _, name := range []string{"web-jobs", "someone-elses"} {
		cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data = map[string]string{"jobs": "forged\n"}
		if why := refused(second(cms.Update(ctx, cm, metav1.UpdateOptions{DryRun: dryRun})), "workers' ConfigMaps"); why != "" {
			t.Errorf("the controller rewrote ConfigMap %s: %s", name, why)
		}
		// Taken over: labelled and owned as a Swarm's on the way.
		taken := workers(name, "web")
		taken.ResourceVersion = cm.ResourceVersion
		if why := refused(second(cms.Update(ctx, taken, metav1.UpdateOptions{DryRun: dryRun})), "workers' ConfigMaps"); why != "" {
			t.Errorf("the controller took ConfigMap %s over as a Swarm's: %s", name, why)
		}
	}
	moved := own.DeepCopy()
	moved.Labels[swarmv1.SwarmLabel], moved.OwnerReferences[0].Name = "api", "api"
	if why := refused(second(cms.Update(ctx, moved, metav1.UpdateOptions{DryRun: dryRun})), "workers' ConfigMaps"); why != "" {
		t.Errorf("the controller moved a workers' ConfigMap to another Swarm: %s", why)
	}
	bare := workers("loose", "web")
	bare.OwnerReferences = nil
	if why := refused(second(cms.Create(ctx, bare, dry)), "workers' ConfigMaps"); why != "" {
		t.Errorf("the controller created a ConfigMap no Swarm owns: %s", why)
	}
}
