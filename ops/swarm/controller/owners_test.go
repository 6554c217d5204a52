package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
)

// TestDeploymentPodsByOwnerUID: the Swarm selects the Deployment "web";
// another Deployment, "web-eu", not selected, runs pods with the same
// labels, its ReplicaSets named "web-eu-<hash>", which start with "web-".
// Only web's pods are workers: they are told by their ReplicaSet's
// controller UID, not by the ReplicaSet's name (before, web-eu's pod was
// counted too, the pool never settled, and after the settle timeout it
// was given jobs).
func TestDeploymentPodsByOwnerUID(t *testing.T) {
	t.Parallel() // a namespace of its own (see TestMain)
	p := newPool(t, true)
	ctx := context.Background()
	podLabels := map[string]string{"app": "web"}
	for _, d := range []struct {
		name     string
		labels   map[string]string
		replicas int32
	}{{"web", map[string]string{"swarm": "work"}, 2}, {"web-eu", nil, 1}} {
		dep := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: d.name, Namespace: p.ns, Labels: d.labels},
			Spec: appsv1.DeploymentSpec{Replicas: &d.replicas, Selector: &metav1.LabelSelector{MatchLabels: podLabels},
				Template: podTemplate(podLabels)},
		}
		if _, err := p.kube.AppsV1().Deployments(p.ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(60 * time.Second); p.readyPods() != 3; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the 3 pods of web and web-eu not Ready: %d", p.readyPods())
		}
	}
	p.createSwarm(swarmv1.SwarmSpec{Jobs: jobNames(0, 6), Refresh: swarmv1.RefreshReload})
	p.waitFor("web's 2 pods converged", func(sw *swarmv1.Swarm) bool {
		return sw.Status.ObservedGeneration == sw.Generation && sw.Status.WorkerCount == 2 &&
			meta.IsStatusConditionTrue(sw.Status.Conditions, swarmv1.ConditionConverged)
	})
	cfg, _ := p.config()
	for w := range cfg.Workloads {
		if strings.HasPrefix(w, "web-eu-") {
			t.Errorf("web-eu's pod %s holds a share of the Swarm over web", w)
		}
	}
}
