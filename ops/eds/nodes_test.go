package eds

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	edslisters "slipway.dev/slipway/ops/generated/eds/listers/eds.slipway.dev/v1alpha1"
)

func TestPlacementChanged(t *testing.T) {
	base := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"a": "1"},
		Annotations: map[string]string{"other": "x", v1.NodeResourcesPrefix + "ns.eds.c": `{}`}}}
	with := func(edit func(*corev1.Node)) *corev1.Node { n := base.DeepCopy(); edit(n); return n }
	now := metav1.Now()
	for name, tt := range map[string]struct {
		cur  *corev1.Node
		want bool
	}{
		"a heartbeat": {with(func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: now}}
		}), false},
		"another annotation": {with(func(n *corev1.Node) { n.Annotations["other"] = "y" }), false},
		"a label":            {with(func(n *corev1.Node) { n.Labels["b"] = "2" }), true},
		"a taint":            {with(func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}} }), true},
		"a resource annotation": {with(func(n *corev1.Node) {
			n.Annotations[v1.DataDogNodeResourcesPrefix+"ns.eds.c"] = `{"limits":{"cpu":"1"}}`
		}), true},
		"deleting": {with(func(n *corev1.Node) { n.DeletionTimestamp = &now }), true},
	} {
		if got := placementChanged(base, tt.cur); got != tt.want {
			t.Errorf("%s: placementChanged = %v, want %v", name, got, tt.want)
		}
	}
}

// Issue 24 item 14: a Node change resyncs only the ExtendedDaemonSets it
// concerns (every Node update resynced every ExtendedDaemonSet): a label
// change on a node syncs the one running there, not one whose selector
// admits no node, and a status heartbeat syncs neither.
func TestNodeChangeResyncsOnlyItsEDSs(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	node := h.addNode("n")
	hour := &metav1.Duration{Duration: time.Hour} // no periodic syncs during the test
	here := h.tolerate(daemon("here", "agent:v1"))
	here.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"eds-test": h.ns}}
	here.Spec.Strategy.ReconcileFrequency = hour
	elsewhere := daemon("elsewhere", "agent:v1")
	elsewhere.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"eds-nowhere": h.ns}}
	elsewhere.Spec.Strategy.ReconcileFrequency = hour
	h.create(here)
	h.create(elsewhere)
	h.rolledOut("here", "agent:v1", 1)
	h.eventually(20*time.Second, "elsewhere has a status", func() (bool, string) {
		st := h.get("elsewhere").Status
		return st.State == v1.StateRunning, fmt.Sprintf("%+v", st)
	})
	syncs := func(name string) float64 { return testutil.ToFloat64(h.ctrl.metrics.syncs.WithLabelValues(h.ns, name)) }
	ctx := context.Background()
	label := func(v string) {
		patch := []byte(`{"metadata":{"labels":{"touch":"` + v + `"}}}`)
		if _, err := h.kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	seen := func(before float64) {
		h.eventually(20*time.Second, "here synced after its node changed", func() (bool, string) {
			return syncs("here") > before, fmt.Sprint(syncs("here"))
		})
	}
	hereBefore := syncs("here")
	label("marker") // lets the syncs of the creations settle
	seen(hereBefore)
	before := syncs("elsewhere")
	for i := range 5 {
		hereBefore = syncs("here")
		label(fmt.Sprint(i))
		heartbeat := []byte(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","lastHeartbeatTime":"` +
			time.Now().UTC().Format(time.RFC3339) + `"}]}}`)
		if _, err := h.kube.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, heartbeat, metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
		seen(hereBefore)
	}
	if after := syncs("elsewhere"); after != before {
		t.Errorf("elsewhere synced %v times on changes of a node it does not concern", after-before)
	}
}

// countingIndexer counts the pods its ByIndex hands out.
type countingIndexer struct {
	cache.Indexer
	handed int
}

func (c *countingIndexer) ByIndex(name, value string) ([]any, error) {
	out, err := c.Indexer.ByIndex(name, value)
	c.handed += len(out)
	return out, err
}

// Defect: each Node event looked at every pod of every ExtendedDaemonSet
// to find those with a pod on the node (O(nodes^2 x EDSs) at start, when
// every node is added). The pods are indexed by node: a Node event reads
// the pods on that node only.
func TestNodeEventReadsOnlyThePodsOfItsNode(t *testing.T) {
	const sets, nodes = 20, 50
	c := &Controller{queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())}
	defer c.queue.ShutDown()
	edsIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	ersIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	pods := &countingIndexer{Indexer: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{
		indexByEDS: func(o any) ([]string, error) {
			p := o.(*corev1.Pod)
			return []string{p.Namespace + "/" + p.Labels[v1.LabelName]}, nil
		},
		indexByNode: func(o any) ([]string, error) { return []string{nodeOf(o.(*corev1.Pod))}, nil },
	})}
	c.sets, c.ers, c.pods = edslisters.NewExtendedDaemonSetLister(edsIdx), edslisters.NewExtendedDaemonSetReplicaSetLister(ersIdx), pods
	for i := range sets {
		e := daemon(fmt.Sprintf("eds-%d", i), "agent:v1")
		e.Namespace = "ns"
		e.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"nowhere": "x"}} // admits no node: only its pods concern it
		if err := edsIdx.Add(e); err != nil {
			t.Fatal(err)
		}
		for n := range nodes {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("eds-%d-%d", i, n), Labels: map[string]string{v1.LabelName: e.Name}},
				Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", n)}}
			if err := pods.Add(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	c.onNode(nil, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-7"}})
	if pods.handed > sets {
		t.Errorf("a Node event read %d pods; the node has %d", pods.handed, sets)
	}
	if c.queue.Len() != sets {
		t.Errorf("%d ExtendedDaemonSets queued, want the %d with a pod on the node", c.queue.Len(), sets)
	}
}
