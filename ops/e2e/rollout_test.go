package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/generated/clientset/versioned"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/upgrade/layout"
	"slipway.dev/slipway/upgrade/releasetest"
)

const (
	ns          = "slipway-system"
	concurrency = 2
	replicas    = 6
	minAvail    = 5
)

type clients struct {
	kube kubernetes.Interface
	ops  versioned.Interface
}

func setup(t testing.TB) clients {
	t.Helper()
	e := testenv.Need(t, env)
	c := clients{kubernetes.NewForConfigOrDie(e.Config), versioned.NewForConfigOrDie(e.Config)}
	_, err := c.kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	dumpOnFailure(t, c)
	return c
}

// observer records, from watches, the worst instants of a rollout.
type observer struct {
	mu                    sync.Mutex
	maxSlots, maxCordoned int
	minAvailable          int
	cordoned              map[string]bool
	ready                 map[string]bool
}

func observe(ctx context.Context, t *testing.T, c clients) *observer {
	o := &observer{minAvailable: replicas, cordoned: map[string]bool{}, ready: map[string]bool{}}
	cw, err := c.ops.OpsV1().UpdateChannels(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nw, err := c.kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pw, err := c.kube.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for ev := range cw.ResultChan() {
			if ch, ok := ev.Object.(*v1.UpdateChannel); ok {
				o.mu.Lock()
				o.maxSlots = max(o.maxSlots, len(ch.Status.Updating))
				o.mu.Unlock()
			}
		}
	}()
	go func() {
		for ev := range nw.ResultChan() {
			if n, ok := ev.Object.(*corev1.Node); ok {
				o.mu.Lock()
				o.cordoned[n.Name] = n.Spec.Unschedulable
				o.maxCordoned = max(o.maxCordoned, count(o.cordoned))
				o.mu.Unlock()
			}
		}
	}()
	go func() {
		for ev := range pw.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				o.mu.Lock()
				o.ready[p.Name] = ev.Type != "DELETED" && p.DeletionTimestamp == nil && podReady(p)
				if len(o.ready) >= replicas { // the watch has shown every existing pod
					o.minAvailable = min(o.minAvailable, count(o.ready))
				}
				o.mu.Unlock()
			}
		}
	}()
	return o
}

func count(m map[string]bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// web creates a Deployment with a PodDisruptionBudget and waits until all its pods are Ready.
func web(t *testing.T, c clients) {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": "web"}
	r := int32(replicas)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &r, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web:1"}}}}}}
	if _, err := c.kube.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mv := intstr.FromInt32(minAvail)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &mv, Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if _, err := c.kube.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 2*time.Minute, "the web Deployment available", func() (bool, error) {
		d, err := c.kube.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
		return err == nil && d.Status.AvailableReplicas == replicas, err
	})
}

// waitUntil re-checks cond every half second until it holds (the simulated
// cluster's objects change through many writers; a condition over several
// objects is simplest to re-read).
func waitUntil(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s (last error: %v)", timeout, what, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func channel(t *testing.T, c clients) *v1.UpdateChannel {
	t.Helper()
	ch, err := c.ops.OpsV1().UpdateChannels(ns).Get(context.Background(), "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func patchChannel(t *testing.T, c clients, patch string) {
	t.Helper()
	if _, err := c.ops.OpsV1().UpdateChannels(ns).Patch(context.Background(), "default", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func current(t *testing.T, node string) string {
	t.Helper()
	v, err := layout.New(filepath.Join(env.NodeDir(node), "k3os", "system")).Current(layout.Rootfs)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestRollout(t *testing.T) {
	c := setup(t)
	web(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}, Spec: v1.UpdateChannelSpec{
		URL: "file://" + mirror, Version: "v1", Concurrency: concurrency,
		RebootDelay: &metav1.Duration{Duration: time.Second},
		Drain:       &v1.DrainSpec{Timeout: &metav1.Duration{Duration: 3 * time.Minute}}}}
	if _, err := c.ops.OpsV1().UpdateChannels(ns).Create(ctx, ch, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 2*time.Minute, "every agent to report v1", func() (bool, error) {
		ch := channel(t, c)
		return ch.Status.Counts.Nodes == nodes && ch.Status.Counts.UpToDate == nodes, nil
	})
	o := observe(ctx, t, c)
	start := time.Now()
	patchChannel(t, c, `{"spec":{"version":"latest"}}`)
	waitUntil(t, 10*time.Minute, "every node at v2", func() (bool, error) {
		ch := channel(t, c)
		complete := meta.FindStatusCondition(ch.Status.Conditions, v1.ConditionComplete)
		return ch.Status.LatestVersion == "v2" && ch.Status.Counts.UpToDate == nodes && len(ch.Status.Updating) == 0 &&
			complete != nil && complete.Status == metav1.ConditionTrue && strings.HasSuffix(complete.Message, "run v2"), nil
	})
	t.Logf("rollout of %d nodes at concurrency %d took %s", nodes, concurrency, time.Since(start).Round(time.Second))
	for _, n := range env.Nodes {
		if v := current(t, n); v != "v2" {
			t.Errorf("node %s: current -> %s, want v2", n, v)
		}
		node, err := c.kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if node.Spec.Unschedulable {
			t.Errorf("node %s left cordoned", n)
		}
		if got := node.Labels[protocol.LabelRootfsVersion]; got != "v2" {
			t.Errorf("node %s: label %s=%q, want v2", n, protocol.LabelRootfsVersion, got)
		}
	}
	assertActsOnPodSuccess(t)
	assertOneSlotPerNode(ctx, t, c)
	rss := agentRSS()
	t.Logf("agent resident memory at %d nodes: %s", nodes, rssSummary(rss))
	o.mu.Lock()
	defer o.mu.Unlock()
	t.Logf("at worst: %d slots held, %d nodes cordoned, %d of %d web pods available (PDB minAvailable %d)",
		o.maxSlots, o.maxCordoned, o.minAvailable, replicas, minAvail)
	if o.maxSlots > concurrency || o.maxCordoned > concurrency {
		t.Errorf("more than concurrency %d nodes at once: %d slots, %d cordoned", concurrency, o.maxSlots, o.maxCordoned)
	}
	if o.maxSlots == 0 || o.maxCordoned == 0 {
		t.Error("the watches saw no slot or no cordon: the observation failed")
	}
	if o.minAvailable < minAvail {
		t.Errorf("the web Deployment fell to %d available pods, below its PDB's %d", o.minAvailable, minAvail)
	}
}

// assertOneSlotPerNode fails when a node that had just finished its slot
// was given another one (its agent then reports AlreadyUpToDate): the
// controller read the node at its old version beside the report that
// ended its slot.
func assertOneSlotPerNode(ctx context.Context, t *testing.T, c clients) {
	t.Helper()
	list, err := c.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=AlreadyUpToDate"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		t.Errorf("a node was given a second slot after its upgrade: %s", e.Message)
	}
}

// TestCorruptReleaseFailsCleanly publishes v3 with a corrupted artifact:
// the first node to try fails cleanly (its system directory untouched),
// the rollout stops at maxFailures and the status says why.
func TestCorruptReleaseFailsCleanly(t *testing.T) {
	c := setup(t)
	if _, err := c.ops.OpsV1().UpdateChannels(ns).Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("this test continues TestRollout's cluster; run the package (go test ./ops/e2e), not this test alone: %v", err)
	}
	rel, err := releasetest.Write(releasetest.Options{Mirror: mirror, Version: "v3"})
	if err != nil {
		t.Fatal(err)
	}
	rootfs := filepath.Join(rel.Dir, "k3os-rootfs-"+rel.Arch+".tar.gz")
	b, err := os.ReadFile(rootfs)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(rootfs, b, 0o644); err != nil {
		t.Fatal(err)
	}
	patchChannel(t, c, `{"spec":{"version":"v3","concurrency":1,"maxFailures":1}}`)
	waitUntil(t, 5*time.Minute, "Degraded", func() (bool, error) {
		return meta.IsStatusConditionTrue(channel(t, c).Status.Conditions, v1.ConditionDegraded), nil
	})
	ch := channel(t, c)
	if len(ch.Status.Failed) != 1 || len(ch.Status.Updating) != 0 {
		t.Fatalf("failed %+v, updating %+v", ch.Status.Failed, ch.Status.Updating)
	}
	f := ch.Status.Failed[0]
	cond := meta.FindStatusCondition(ch.Status.Conditions, v1.ConditionDegraded)
	t.Logf("failed: %s: %s", f.Node, f.Reason)
	t.Logf("Degraded: %s", cond.Message)
	if !strings.Contains(cond.Message, f.Node) || f.Version != "v3" || !strings.Contains(strings.ToLower(f.Reason), "sha256") {
		t.Errorf("the status must say which node failed and why: %+v / %q", f, cond.Message)
	}
	for _, n := range env.Nodes {
		if v := current(t, n); v != "v2" {
			t.Errorf("node %s: current -> %s, want v2 untouched", n, v)
		}
	}
	if ch.Status.Counts.UpToDate != 0 || ch.Status.Counts.Failed != 1 {
		t.Errorf("counts = %+v", ch.Status.Counts)
	}
}

// assertActsOnPodSuccess checks, from the audit log, that the agents
// cordon their nodes on the upgrade pod's success, and that no slot's
// work and no staging run went through a Job: each Pod is the agent's
// own, with no Job controller (its queue, its client's limit) between.
func assertActsOnPodSuccess(t *testing.T) {
	time.Sleep(2 * time.Second) // the apiserver writes its audit log in batches, at least every second
	events, err := testenv.ReadAudit(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	medians, handover := timeline(events, env.Nodes)
	podDone, cordoned := medians[1], medians[3] // a slot's Pod has no Job to complete
	t.Log(timelineLine(medians, handover))
	if podDone == 0 || cordoned == 0 {
		t.Fatalf("the audit log lacks steps (pod done %s, cordoned %s)", podDone, cordoned)
	}
	for _, ev := range events {
		slotOrStage := strings.HasPrefix(ev.Name, protocol.JobKindUpgrade+"-") || strings.HasPrefix(ev.Name, protocol.JobKindStage+"-")
		if ev.Verb == "create" && ev.Resource == "jobs" && slotOrStage && ev.Code < 300 {
			t.Errorf("a slot's work or a staging run created as Job %s: its Pod's pace would be the Job controller's", ev.Name)
		}
	}
}
