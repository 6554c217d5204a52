package drain

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.RunMain(m, testenv.Options{}, &env)) }

func client(t *testing.T) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(testenv.Need(t, env).Config)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// slim is the client the package's functions take (the agent's).
func slim(t *testing.T) *kube.Clientset {
	t.Helper()
	c, err := kube.NewForConfig(testenv.Need(t, env).Config)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func makeNode(t *testing.T, c kubernetes.Interface, name string, unschedulable bool) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Unschedulable: unschedulable}}
	if _, err := c.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // the next run of the test (-count) makes it again
		if err := c.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete node %s: %v", name, err)
		}
	})
}

func getNode(t *testing.T, c kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// namespaces counts the namespaces made, so every run of a test (-count)
// has its own: without a controller manager a deleted one stays Terminating.
var namespaces atomic.Int32

func namespace(t *testing.T, c kubernetes.Interface) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())), namespaces.Add(1))
	_, err := c.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Without a controller manager nobody creates the default ServiceAccount.
	_, err = c.CoreV1().ServiceAccounts(name).Create(context.Background(),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return name
}

// makePod binds a pod to node; kind names its controller ("" = none).
func makePod(t *testing.T, c kubernetes.Interface, ns, name, node, kind string, mutate ...func(*corev1.Pod)) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "img"}}},
	}
	if kind != "" {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: "owner", UID: "uid-owner", Controller: &yes}}
	}
	for _, m := range mutate {
		m(p)
	}
	created, err := c.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Running and Ready, as a kubelet would report it: only healthy pods count for a PDB.
	created.Status.Phase = corev1.PodRunning
	created.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if _, err := c.CoreV1().Pods(ns).UpdateStatus(context.Background(), created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func podNames(t *testing.T, c kubernetes.Interface, ns string) []string {
	t.Helper()
	l, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range l.Items {
		out = append(out, p.Name)
	}
	return out
}

var zero = int64(0)

func TestCordonUncordon(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	makeNode(t, c, "cordon-a", false)
	for range 2 { // idempotent
		if err := Cordon(ctx, slim(t), "cordon-a", "slipway-agent"); err != nil {
			t.Fatal(err)
		}
	}
	n := getNode(t, c, "cordon-a")
	if !n.Spec.Unschedulable || n.Annotations[AnnotationCordonedBy] != "slipway-agent" || n.Annotations[AnnotationSchedulableBefore] != "true" {
		t.Fatalf("after Cordon: unschedulable=%v annotations=%v", n.Spec.Unschedulable, n.Annotations)
	}
	if changed, err := Uncordon(ctx, slim(t), "cordon-a", "someone-else"); err != nil || changed {
		t.Fatalf("another owner's Uncordon changed=%v err=%v", changed, err)
	}
	if changed, err := Uncordon(ctx, slim(t), "cordon-a", "slipway-agent"); err != nil || !changed {
		t.Fatalf("Uncordon changed=%v err=%v", changed, err)
	}
	if changed, err := Uncordon(ctx, slim(t), "cordon-a", "slipway-agent"); err != nil || changed {
		t.Fatalf("second Uncordon changed=%v err=%v", changed, err)
	}
	n = getNode(t, c, "cordon-a")
	if n.Spec.Unschedulable || n.Annotations[AnnotationCordonedBy] != "" {
		t.Fatalf("after Uncordon: unschedulable=%v annotations=%v", n.Spec.Unschedulable, n.Annotations)
	}
}

func TestUncordonKeepsAnAdminsCordon(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	makeNode(t, c, "cordon-b", true)
	if err := Cordon(ctx, slim(t), "cordon-b", "slipway-agent"); err != nil {
		t.Fatal(err)
	}
	if _, err := Uncordon(ctx, slim(t), "cordon-b", "slipway-agent"); err != nil {
		t.Fatal(err)
	}
	n := getNode(t, c, "cordon-b")
	if !n.Spec.Unschedulable || n.Annotations[AnnotationCordonedBy] != "" {
		t.Fatalf("a node cordoned by its admin must stay cordoned: unschedulable=%v annotations=%v", n.Spec.Unschedulable, n.Annotations)
	}
}

func TestDrainEvictsAndSkips(t *testing.T) {
	c := client(t)
	ns := namespace(t, c)
	makeNode(t, c, "drain-a", false)
	makeNode(t, c, "drain-other", false)
	makePod(t, c, ns, "web-1", "drain-a", "ReplicaSet")
	makePod(t, c, ns, "web-2", "drain-a", "ReplicaSet")
	makePod(t, c, ns, "elsewhere", "drain-other", "ReplicaSet")
	makePod(t, c, ns, "ds", "drain-a", "DaemonSet")
	makePod(t, c, ns, "mirror", "drain-a", "", func(p *corev1.Pod) {
		p.Annotations = map[string]string{mirrorAnnotation: "x"}
	})
	makePod(t, c, ns, "other-app", "drain-a", "ReplicaSet", func(p *corev1.Pod) { p.Labels["app"] = "db" })
	res, err := Drain(context.Background(), slim(t), "drain-a", Options{Timeout: 30 * time.Second, IgnoreDaemonSets: true,
		GracePeriodSeconds: &zero, PodSelector: "app=web", RetryInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Evicted) != 2 {
		t.Fatalf("evicted %v, want web-1 and web-2", res.Evicted)
	}
	got := strings.Join(podNames(t, c, ns), ",")
	if got != "ds,elsewhere,mirror,other-app" {
		t.Fatalf("pods left: %s", got)
	}
}

func TestDrainRefusesWhatThePolicyForbids(t *testing.T) {
	c := client(t)
	ns := namespace(t, c)
	makeNode(t, c, "drain-b", false)
	makePod(t, c, ns, "bare", "drain-b", "")
	makePod(t, c, ns, "scratch", "drain-b", "ReplicaSet", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	})
	_, err := Drain(context.Background(), slim(t), "drain-b", Options{Timeout: 10 * time.Second, GracePeriodSeconds: &zero})
	if !errors.Is(err, ErrBlocked) || !strings.Contains(err.Error(), ns+"/bare") || !strings.Contains(err.Error(), ns+"/scratch") {
		t.Fatalf("Drain = %v, want ErrBlocked naming both pods", err)
	}
	if len(podNames(t, c, ns)) != 2 {
		t.Fatal("a refused drain must not remove pods")
	}
}

// makePDB creates a PDB over app=web and sets its status as the disruption
// controller would, allowing `allowed` disruptions.
func makePDB(t *testing.T, c kubernetes.Interface, ns string, allowed int32) {
	t.Helper()
	ctx := context.Background()
	one := intstr.FromInt32(1)
	pdb, err := c.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, DisruptionsAllowed: allowed,
		CurrentHealthy: 1 + allowed, DesiredHealthy: 1, ExpectedPods: 1 + allowed}
	if _, err := c.PolicyV1().PodDisruptionBudgets(ns).UpdateStatus(ctx, pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestDrainHonoursPDBAndTimesOut(t *testing.T) {
	c := client(t)
	ns := namespace(t, c)
	makeNode(t, c, "drain-c", false)
	makePod(t, c, ns, "web-1", "drain-c", "ReplicaSet")
	makePod(t, c, ns, "web-2", "drain-c", "ReplicaSet")
	makePDB(t, c, ns, 1)
	res, err := Drain(context.Background(), slim(t), "drain-c", Options{Timeout: 2 * time.Second, GracePeriodSeconds: &zero,
		RetryInterval: 200 * time.Millisecond})
	if !errors.Is(err, ErrBlocked) || !strings.Contains(err.Error(), "drain.force") {
		t.Fatalf("Drain = %v, want ErrBlocked that names drain.force", err)
	}
	if len(res.Evicted) != 1 || len(podNames(t, c, ns)) != 1 {
		t.Fatalf("the PDB allowed exactly one eviction: evicted %v, left %v", res.Evicted, podNames(t, c, ns))
	}
	left := podNames(t, c, ns)[0]
	if !strings.Contains(err.Error(), ns+"/"+left) {
		t.Fatalf("the error must name the blocked pod %s: %v", left, err)
	}
	res, err = Drain(context.Background(), slim(t), "drain-c", Options{Timeout: time.Second, GracePeriodSeconds: &zero,
		Force: true, RetryInterval: 200 * time.Millisecond})
	if err != nil || len(res.Deleted) != 1 {
		t.Fatalf("forced Drain = %+v, %v", res, err)
	}
	if left := podNames(t, c, ns); len(left) != 0 {
		t.Fatalf("pods left after a forced drain: %v", left)
	}
}

func TestVerdict(t *testing.T) {
	yes := true
	owned := func(kind string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{Kind: kind, Controller: &yes}}}}
	}
	emptyDir := owned("ReplicaSet")
	emptyDir.Spec.Volumes = []corev1.Volume{{VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	done := owned("Job")
	done.Status.Phase = corev1.PodSucceeded
	bareEmptyDir := corev1.Pod{Spec: emptyDir.Spec}
	own := owned("ReplicaSet")
	own.Namespace, own.Labels = "sys", map[string]string{"app": "ctl", "tier": "x"}
	ownBare := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "sys", Labels: own.Labels}, Spec: emptyDir.Spec}
	keep := []PodSet{{Namespace: "sys", Labels: map[string]string{"app": "ctl"}}}
	elsewhere := own
	elsewhere.Namespace = "apps"
	otherApp := own
	otherApp.Labels = map[string]string{"app": "web"}
	for i, tc := range []struct {
		pod  corev1.Pod
		opts Options
		want podVerdict
	}{
		{owned("ReplicaSet"), Options{}, evictIt},
		{owned("DaemonSet"), Options{IgnoreDaemonSets: true}, skip},
		{owned("DaemonSet"), Options{}, refuse},
		{corev1.Pod{}, Options{}, refuse},
		{corev1.Pod{}, Options{Force: true}, evictIt},
		{corev1.Pod{}, Options{EvictUnmanaged: true}, evictIt},
		{bareEmptyDir, Options{EvictUnmanaged: true}, refuse},
		{bareEmptyDir, Options{EvictUnmanaged: true, DeleteEmptyDirData: true}, evictIt},
		{emptyDir, Options{}, refuse},
		{emptyDir, Options{DeleteEmptyDirData: true}, evictIt},
		{done, Options{}, skip},
		{corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{mirrorAnnotation: ""}}}, Options{}, skip},
		// The caller's own pods stay, whatever the policy would do with them.
		{own, Options{Keep: keep}, skip},
		{ownBare, Options{Keep: keep}, skip},
		{own, Options{}, evictIt},
		{elsewhere, Options{Keep: keep}, evictIt},                                    // the same labels in another namespace
		{otherApp, Options{Keep: keep}, evictIt},                                     // another app in the caller's namespace
		{own, Options{Keep: []PodSet{{Namespace: "sys"}}}, evictIt},                  // no labels: no pods
		{own, Options{Keep: []PodSet{{Namespace: "sys", Labels: own.Labels}}}, skip}, // every label matched
	} {
		if got := verdict(tc.pod, tc.opts); got != tc.want {
			t.Errorf("case %d: verdict = %d, want %d", i, got, tc.want)
		}
	}
}

// The refusal names the setting to change, as the caller spells it (the
// drain.* field of a spec by default).
func TestRefuseReasonNamesTheCallersFlag(t *testing.T) {
	yes := true
	emptyDir := corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Controller: &yes}}},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{{VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}}}
	flags := Flags{DeleteEmptyDirData: "--drain-delete-emptydir", EvictUnmanaged: "--drain-unmanaged", Force: "--drain-force"}
	for _, tc := range []struct {
		pod  corev1.Pod
		opts Options
		want string
	}{
		{corev1.Pod{}, Options{}, "set drain.force to delete it"},
		{emptyDir, Options{}, "set drain.deleteEmptyDirData"},
		{corev1.Pod{}, Options{Flags: flags}, "set --drain-unmanaged to evict it"},
		{emptyDir, Options{Flags: flags}, "set --drain-delete-emptydir"},
		{corev1.Pod{Spec: emptyDir.Spec}, Options{Flags: flags, EvictUnmanaged: true}, "set --drain-delete-emptydir"},
	} {
		if got := refuseReason(tc.pod, tc.opts); !strings.Contains(got, tc.want) {
			t.Errorf("refuseReason = %q, want it to say %q", got, tc.want)
		}
	}
}

// TestDrainStoppedIsNotTimedOut: a caller that stops mid-drain (the agent
// shutting down) gets its context's error, and drain.force deletes nothing.
func TestDrainStoppedIsNotTimedOut(t *testing.T) {
	c := client(t)
	ns := namespace(t, c)
	makeNode(t, c, "drain-stop", false)
	makePod(t, c, ns, "web-1", "drain-stop", "ReplicaSet")
	makePDB(t, c, ns, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	res, err := Drain(ctx, slim(t), "drain-stop", Options{Timeout: time.Minute, GracePeriodSeconds: &zero,
		Force: true, RetryInterval: 100 * time.Millisecond})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrBlocked) {
		t.Fatalf("Drain = %v, want the caller's context error", err)
	}
	if len(res.Deleted) != 0 || len(podNames(t, c, ns)) != 1 {
		t.Fatalf("a stopped drain deleted pods: deleted %v, left %v", res.Deleted, podNames(t, c, ns))
	}
}

// A node another owner cordoned is not taken over: Cordon refuses it,
// naming that owner, and the record and the cordon stay that owner's (a
// takeover recorded the node as schedulable before, and the second
// owner's uncordon lifted the first one's cordon mid-update).
func TestCordonRefusesAnotherOwnersCordon(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	makeNode(t, c, "cordon-other", false)
	if err := Cordon(ctx, slim(t), "cordon-other", "slipway-agent"); err != nil {
		t.Fatal(err)
	}
	seen := getNode(t, c, "cordon-other")
	for _, s := range []*corev1.Node{nil, seen} {
		_, err := CordonSeen(ctx, slim(t), "cordon-other", s, "slipway-update-operator", map[string]string{"x.example/started": "now"})
		if !errors.Is(err, ErrCordonedByOther) || !strings.Contains(err.Error(), `"slipway-agent"`) {
			t.Fatalf("Cordon by another owner: %v, want ErrCordonedByOther naming slipway-agent", err)
		}
	}
	n := getNode(t, c, "cordon-other")
	if !n.Spec.Unschedulable || n.Annotations[AnnotationCordonedBy] != "slipway-agent" || n.Annotations["x.example/started"] != "" {
		t.Fatalf("after the refusal: unschedulable=%v annotations=%v", n.Spec.Unschedulable, n.Annotations)
	}
	if changed, err := Uncordon(ctx, slim(t), "cordon-other", "slipway-update-operator"); err != nil || changed {
		t.Fatalf("the refused owner's Uncordon changed=%v err=%v", changed, err)
	}
}
