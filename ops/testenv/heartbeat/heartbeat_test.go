package heartbeat_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/testenv/heartbeat"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.RunMain(m, testenv.Options{}, &env))
}

// conditions are a fake node's, as kwok's node-initialize stage writes them.
func conditions(ready corev1.ConditionStatus, at time.Time) []corev1.NodeCondition {
	t := metav1.NewTime(at)
	var cs []corev1.NodeCondition
	for _, c := range []struct {
		typ    corev1.NodeConditionType
		status corev1.ConditionStatus
	}{{corev1.NodeReady, ready}, {corev1.NodeMemoryPressure, corev1.ConditionFalse}, {corev1.NodeDiskPressure, corev1.ConditionFalse}} {
		cs = append(cs, corev1.NodeCondition{Type: c.typ, Status: c.status, Reason: "Sim", Message: "simulated",
			LastHeartbeatTime: t, LastTransitionTime: t})
	}
	return cs
}

func createNode(t *testing.T, cs kubernetes.Interface, name string, ready corev1.ConditionStatus, at time.Time) {
	t.Helper()
	ctx := context.Background()
	n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions = conditions(ready, at)
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}) })
}

// withoutHeartbeats is the status with every lastHeartbeatTime zeroed.
func withoutHeartbeats(s corev1.NodeStatus) corev1.NodeStatus {
	s = *s.DeepCopy()
	for i := range s.Conditions {
		s.Conditions[i].LastHeartbeatTime = metav1.Time{}
	}
	return s
}

// TestEachReadyNodeIsReportedOncePerPeriod runs the heartbeat over three
// nodes, one NotReady, for three periods of two seconds, while another
// client annotates one of them every 300 ms, and watches what is written:
// each Ready node's heartbeat moves about once a period, the other
// writer's annotations neither putting it off nor drawing more (as kwok's
// stage did), nothing else of its status changes, and the NotReady node's
// heartbeat never moves.
func TestEachReadyNodeIsReportedOncePerPeriod(t *testing.T) {
	if env == nil {
		t.Skip("no control plane: SLIPWAY_SKIP_CLUSTER=1 or -short")
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-time.Minute).Truncate(time.Second)
	nodes := []string{"beat-a", "beat-b", "beat-down"}
	createNode(t, cs, "beat-a", corev1.ConditionTrue, start)
	createNode(t, cs, "beat-b", corev1.ConditionTrue, start)
	createNode(t, cs, "beat-down", corev1.ConditionFalse, start)
	before := map[string]corev1.NodeStatus{}
	list, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range list.Items {
		before[n.Name] = n.Status
	}
	w, err := cs.CoreV1().Nodes().Watch(context.Background(), metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	const period, periods = 2 * time.Second, 3
	ctx, cancel := context.WithTimeout(context.Background(), periods*period)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- heartbeat.Run(ctx, heartbeat.Options{Client: cs, Nodes: nodes, Period: period}) }()
	go annotateUntil(ctx, cs, "beat-a", 300*time.Millisecond)

	writes := map[string]int{}
	last := map[string]time.Time{} // each node's heartbeat as last seen
	for n, st := range before {
		last[n] = st.Conditions[0].LastHeartbeatTime.Time
	}
	for collecting := true; collecting; {
		select {
		case ev := <-w.ResultChan():
			n, ok := ev.Object.(*corev1.Node)
			if !ok || ev.Type != watch.Modified || n.Status.Conditions[0].LastHeartbeatTime.Time.Equal(last[n.Name]) {
				continue // not a heartbeat: the other writer's annotation
			}
			last[n.Name] = n.Status.Conditions[0].LastHeartbeatTime.Time
			writes[n.Name]++
			if !equality.Semantic.DeepEqual(withoutHeartbeats(n.Status), withoutHeartbeats(before[n.Name])) {
				t.Errorf("%s: a heartbeat changed more than the heartbeat times:\n%+v\nwas\n%+v", n.Name, n.Status, before[n.Name])
			}
			for _, c := range n.Status.Conditions {
				if !c.LastHeartbeatTime.After(start) {
					t.Errorf("%s: condition %s's heartbeat not moved: %v", n.Name, c.Type, c.LastHeartbeatTime)
				}
			}
		case <-ctx.Done():
			collecting = false
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"beat-a", "beat-b"} {
		if writes[n] < periods-1 || writes[n] > periods {
			t.Errorf("%s reported %d times in %d periods, want %d or %d", n, writes[n], periods, periods-1, periods)
		}
	}
	if writes["beat-down"] != 0 {
		t.Errorf("the NotReady node was written %d times, want 0", writes["beat-down"])
	}
}

// annotateUntil writes an annotation on node every interval until ctx
// ends: another client writing the Node, as an operator's agent does.
func annotateUntil(ctx context.Context, cs kubernetes.Interface, node string, interval time.Duration) {
	for i := 0; ctx.Err() == nil; i++ {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"other-writer":"%d"}}}`, i)
		_, _ = cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
	}
}

// TestReportRefusedWhenTheNodeTurnedNotReady reads a Ready node, turns it
// NotReady behind the reader's back, and sends the report built from the
// read: the API server refuses it and the node keeps its status.
func TestReportRefusedWhenTheNodeTurnedNotReady(t *testing.T) {
	if env == nil {
		t.Skip("no control plane: SLIPWAY_SKIP_CLUSTER=1 or -short")
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now().Add(-time.Minute).Truncate(time.Second)
	createNode(t, cs, "beat-turned", corev1.ConditionTrue, start)
	read, err := cs.CoreV1().Nodes().Get(ctx, "beat-turned", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	down := read.DeepCopy()
	down.Status.Conditions = conditions(corev1.ConditionFalse, start)
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, down, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := heartbeat.Report(ctx, cs, "beat-turned", read.Status.Conditions, time.Now()); err == nil {
		t.Fatal("the report built from a Ready read was taken by a NotReady node")
	}
	got, err := cs.CoreV1().Nodes().Get(ctx, "beat-turned", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range got.Status.Conditions {
		if !c.LastHeartbeatTime.Time.Equal(start) {
			t.Errorf("condition %s's heartbeat moved to %v on a NotReady node", c.Type, c.LastHeartbeatTime)
		}
	}
}
