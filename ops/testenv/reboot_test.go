package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"slipway.dev/slipway/ops/testenv/supervisor"
)

// TestRebootSimulation reboots a node through the supervisor's socket, as a
// node's command would, and checks every step a real reboot shows: the
// command stopped, the node NotReady, then Ready with a new boot ID, /run
// emptied and the command started again with NODE_NAME and SLIPWAY_NODE_DIR.
func TestRebootSimulation(t *testing.T) {
	cs := clientset(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := cluster.Nodes[len(cluster.Nodes)-1]
	dir := filepath.Join(cluster.NodesRoot, node)
	before, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if before.Status.NodeInfo.BootID == "" { // registered with one (FakeNode), kept by kwok's stages
		t.Fatalf("node %s has no boot ID before its first reboot", node)
	}
	oldPid := cluster.Supervisor.Pids()[node]
	if oldPid == 0 {
		t.Fatalf("no command running for %s", node)
	}
	if err := os.MkdirAll(filepath.Join(dir, "run", "k3os"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "run", "k3os", "upgrade.lock"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	// Watch from the current state so that the NotReady phase cannot be missed.
	lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "nodes", "", fields.OneTermEqualSelector("metadata.name", node))
	wentDown := false
	done := make(chan error, 1)
	go func() {
		_, err := watchtools.Until(ctx, before.ResourceVersion, lw, func(ev watch.Event) (bool, error) {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				return false, nil
			}
			if !NodeReady(n) {
				wentDown = true
			}
			return wentDown && NodeReady(n) && n.Status.NodeInfo.BootID != before.Status.NodeInfo.BootID, nil
		})
		done <- err
	}()
	if err := supervisor.Send(ctx, cluster.Socket, supervisor.Request{Op: "reboot", Node: node, Delay: "1s"}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("node %s did not go NotReady and come back with a new boot ID: %v", node, err)
	}
	// The command restarts right after the node is Ready again.
	for cluster.Supervisor.Boots(node) < 2 && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	newPid := cluster.Supervisor.Pids()[node]
	if newPid == 0 || newPid == oldPid {
		t.Fatalf("command pid %d after reboot, was %d", newPid, oldPid)
	}
	if fileExists("/proc/" + itoa(oldPid)) {
		t.Errorf("the command from before the reboot (pid %d) still runs", oldPid)
	}
	if fileExists(filepath.Join(dir, "run", "k3os", "upgrade.lock")) {
		t.Error("/run survived the reboot")
	}
	var boots string
	for ctx.Err() == nil {
		b, _ := os.ReadFile(filepath.Join(dir, "boots"))
		if boots = string(b); strings.Count(boots, "\n") >= 2 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if want := node + " " + dir + "\n"; boots != want+want {
		t.Errorf("boots file %q, want two lines %q", boots, want)
	}
}

// TestRebootWait: a reboot sent with Wait is answered only once the node is
// back: Ready, its new boot ID on the Node, its command started again.
func TestRebootWait(t *testing.T) {
	cs := clientset(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := cluster.Nodes[len(cluster.Nodes)-2]
	before, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	boots := cluster.Supervisor.Boots(node)
	if err := supervisor.Send(ctx, cluster.Socket, supervisor.Request{Op: "reboot", Node: node, Delay: "1s", Wait: true}); err != nil {
		t.Fatal(err)
	}
	after, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !NodeReady(after) || after.Status.NodeInfo.BootID == before.Status.NodeInfo.BootID {
		t.Errorf("answered with %s ready=%v, boot ID %q (was %q): want Ready with a new boot ID",
			node, NodeReady(after), after.Status.NodeInfo.BootID, before.Status.NodeInfo.BootID)
	}
	if got := cluster.Supervisor.Boots(node); got != boots+1 {
		t.Errorf("boots %d when answered, want %d: the command was not started again yet", got, boots+1)
	}
}

func TestRebootUnknownNode(t *testing.T) {
	Need(t, cluster)
	err := supervisor.Send(context.Background(), cluster.Socket, supervisor.Request{Op: "reboot", Node: "no-such-node"})
	if err == nil || !strings.Contains(err.Error(), "not supervised") {
		t.Fatalf("reboot of an unknown node: %v, want an error", err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestPodsReadyAgainAfterReboot: a pod left on a rebooted node (a
// DaemonSet's, say), marked NotReady while the node was down as the node
// lifecycle controller does, is Ready again once the node is back.
func TestPodsReadyAgainAfterReboot(t *testing.T) {
	cs := clientset(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := cluster.Nodes[0]
	pod := steadyPod(node)
	pod.Name = "stays-through-reboot"
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cs.CoreV1().Pods("default").Delete(context.Background(), pod.Name, metav1.DeleteOptions{}) }()
	until(t, cs.CoreV1().RESTClient(), "pods", "default", pod.Name, &corev1.Pod{}, func(o runtime.Object) bool { return podReady(o.(*corev1.Pod)) })
	rebooted := make(chan error, 1)
	go func() { rebooted <- cluster.Reboot(ctx, node, 2*time.Second) }()
	until(t, cs.CoreV1().RESTClient(), "nodes", "", node, &corev1.Node{}, func(o runtime.Object) bool { return !NodeReady(o.(*corev1.Node)) })
	notReady := []byte(`{"status":{"conditions":[{"type":"Ready","status":"False","reason":"NodeNotReady"}]}}`)
	if _, err := cs.CoreV1().Pods("default").Patch(ctx, pod.Name, types.StrategicMergePatchType, notReady, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	if err := <-rebooted; err != nil {
		t.Fatal(err)
	}
	until(t, cs.CoreV1().RESTClient(), "pods", "default", pod.Name, &corev1.Pod{}, func(o runtime.Object) bool { return podReady(o.(*corev1.Pod)) })
}

// TestRebootTimeCountsFromTheRequest: a reboot's delay is its time from the
// request to the host's return, as a host's reboot time is, so a command
// slow to stop (3 s after SIGTERM) shortens the downtime that follows
// instead of adding to it; and the command starts again, as a kubelet
// starts the node's pods, before the node is seen Ready, after the new
// boot ID is on the Node. It runs its own supervisor on a node of the
// cluster (the cluster's command for it runs on undisturbed).
func TestRebootTimeCountsFromTheRequest(t *testing.T) {
	cs := clientset(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := cluster.Nodes[len(cluster.Nodes)-1]
	slowStop := `if [ "$SLIPWAY_NODE_BOOT" = 1 ]; then trap 'sleep 3; exit 0' TERM; while :; do sleep 0.1; done; fi; exec sleep 100000`
	s, err := supervisor.New(supervisor.Options{Client: cs, Nodes: []string{node}, NodesRoot: t.TempDir(), Command: []string{"sh", "-c", slowStop}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	before, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 1) // what the node showed when first Ready again
	go func() {
		lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "nodes", "", fields.OneTermEqualSelector("metadata.name", node))
		wentDown := false
		_, _ = watchtools.Until(ctx, before.ResourceVersion, lw, func(ev watch.Event) (bool, error) {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				return false, nil
			}
			if !NodeReady(n) {
				wentDown = true
			}
			if !wentDown || !NodeReady(n) {
				return false, nil
			}
			seen <- fmt.Sprintf("boots %d, new boot ID %v", s.Boots(node), n.Status.NodeInfo.BootID != before.Status.NodeInfo.BootID)
			return true, nil
		})
	}()
	const delay, stop = 4 * time.Second, 3 * time.Second
	start := time.Now()
	if err := s.Reboot(ctx, node, delay); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if took < delay {
		t.Errorf("the reboot took %s, less than its delay %s", took, delay)
	}
	if took >= delay+stop-500*time.Millisecond {
		t.Errorf("the reboot took %s: its delay %s was added to the command's %s stop, not counted from the request", took, delay, stop)
	}
	select {
	case got := <-seen:
		if want := "boots 2, new boot ID true"; got != want {
			t.Errorf("when the node was first seen Ready again: %s, want %s (the command started and the boot ID new before Ready)", got, want)
		}
	case <-ctx.Done():
		t.Fatal("the node was not seen NotReady and Ready again")
	}
}
