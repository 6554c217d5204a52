package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

var cluster *Env

// fakeSlipway stands in for the slipway binary in executed pods: it records its arguments.
const fakeSlipway = "#!/bin/sh\necho \"$@\" > \"$SLIPWAY_NODE_DIR/slipway-args\"\n"

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	bin, err := os.MkdirTemp("", "slipway-testenv-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(bin)
	if err := os.WriteFile(filepath.Join(bin, "slipway"), []byte(fakeSlipway), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return RunMain(m, Options{Cluster: true, Nodes: 3, ExecPath: bin + ":/usr/bin:/bin",
		NodeCommand: []string{"sh", "-c", `echo "$NODE_NAME $SLIPWAY_NODE_DIR" >> boots; exec sleep 100000`}}, &cluster)
}

// until watches one object until cond holds or a minute passes.
func until(t *testing.T, c cache.Getter, resource, ns, name string, obj runtime.Object, cond func(runtime.Object) bool) runtime.Object {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lw := cache.NewListWatchFromClient(c, resource, ns, fields.OneTermEqualSelector("metadata.name", name))
	ev, err := watchtools.UntilWithSync(ctx, lw, obj, nil, func(ev watch.Event) (bool, error) {
		return ev.Type != watch.Deleted && cond(ev.Object), nil
	})
	if err != nil {
		t.Fatalf("wait for %s %s/%s: %v", resource, ns, name, err)
	}
	return ev.Object
}

func clientset(t *testing.T) *kubernetes.Clientset {
	return kubernetes.NewForConfigOrDie(Need(t, cluster).Config)
}

func podTemplate(app string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/fake"}}},
	}
}

func TestDeploymentBecomesReady(t *testing.T) {
	cs := clientset(t)
	ctx := context.Background()
	replicas := int32(4)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: podTemplate("web")}}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	until(t, cs.AppsV1().RESTClient(), "deployments", "default", "web", &appsv1.Deployment{}, func(o runtime.Object) bool {
		return o.(*appsv1.Deployment).Status.ReadyReplicas == replicas
	})
}

func TestDaemonSetCoversEveryNode(t *testing.T) {
	cs := clientset(t)
	ctx := context.Background()
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
			Template: podTemplate("agent")}}
	if _, err := cs.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n := int32(len(cluster.Nodes))
	until(t, cs.AppsV1().RESTClient(), "daemonsets", "default", "agent", &appsv1.DaemonSet{}, func(o runtime.Object) bool {
		s := o.(*appsv1.DaemonSet).Status
		return s.DesiredNumberScheduled == n && s.NumberReady == n
	})
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=agent"})
	if err != nil {
		t.Fatal(err)
	}
	on := map[string]bool{}
	for _, p := range pods.Items {
		on[p.Spec.NodeName] = p.Status.Phase == corev1.PodRunning
	}
	for _, node := range cluster.Nodes {
		if !on[node] {
			t.Errorf("no running DaemonSet pod on %s", node)
		}
	}
}

func TestEvictionRespectsPDB(t *testing.T) {
	cs := clientset(t)
	ctx := context.Background()
	replicas := int32(2)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}},
			Template: podTemplate("guarded")}}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	minAvail := intstr.FromInt32(2)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvail, Selector: d.Spec.Selector}}
	if _, err := cs.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pdbState := func(allowed int32) func(runtime.Object) bool {
		return func(o runtime.Object) bool {
			p := o.(*policyv1.PodDisruptionBudget)
			return p.Status.ObservedGeneration == p.Generation && p.Status.CurrentHealthy == 2 && p.Status.DisruptionsAllowed == allowed
		}
	}
	until(t, cs.PolicyV1().RESTClient(), "poddisruptionbudgets", "default", "guarded", &policyv1.PodDisruptionBudget{}, pdbState(0))
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=guarded"})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("list pods: %v", err)
	}
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pods.Items[0].Name, Namespace: "default"}}
	err = cs.CoreV1().Pods("default").EvictV1(ctx, ev)
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("eviction while the PDB forbids it: %v, want 429 TooManyRequests", err)
	}
	cur, err := cs.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "guarded", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	one := intstr.FromInt32(1)
	cur.Spec.MinAvailable = &one
	if _, err := cs.PolicyV1().PodDisruptionBudgets("default").Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	until(t, cs.PolicyV1().RESTClient(), "poddisruptionbudgets", "default", "guarded", &policyv1.PodDisruptionBudget{}, pdbState(1))
	if err := cs.CoreV1().Pods("default").EvictV1(ctx, ev); err != nil {
		t.Fatalf("eviction while the PDB permits it: %v", err)
	}
}
