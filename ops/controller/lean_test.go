package controller

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/protocol"
)

// slipwayKey tells whether a label or annotation key is slipway's.
func slipwayKey(k string) bool { return strings.Contains(k, "slipway.dev/") }

// slipwayPart is what slipway adds to Node n, as a watcher receives it:
// its labels and annotations and the managedFields entries of its
// managers, in JSON bytes (n's size less n without them).
func slipwayPart(n *corev1.Node) int {
	full, _ := json.Marshal(n)
	bare := n.DeepCopy()
	maps.DeleteFunc(bare.Labels, func(k, _ string) bool { return slipwayKey(k) })
	maps.DeleteFunc(bare.Annotations, func(k, _ string) bool { return slipwayKey(k) })
	bare.ManagedFields = slices.DeleteFunc(bare.ManagedFields, func(m metav1.ManagedFieldsEntry) bool { return strings.Contains(m.Manager, "slipway") })
	less, _ := json.Marshal(bare)
	return len(full) - len(less)
}

// slipwayState is what of Node n slipway writes: its labels and
// annotations, and the cordon.
func slipwayState(n *corev1.Node) string {
	keep := func(m map[string]string) map[string]string {
		out := maps.Clone(m)
		maps.DeleteFunc(out, func(k, _ string) bool { return !slipwayKey(k) })
		return out
	}
	b, _ := json.Marshal([]any{keep(n.Labels), keep(n.Annotations), n.Spec.Unschedulable})
	return string(b)
}

// nodeWrites counts, from a watch of the fleet's Nodes, the changes of
// slipway's part of each Node (the writes of slipway that reached every
// watcher of Nodes), until stop is called.
func (f *fleet) nodeWrites(t *testing.T) (stop func() map[string]int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	list, err := f.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "fleet=" + f.NS})
	if err != nil {
		t.Fatal(err)
	}
	last, counts := map[string]string{}, map[string]int{}
	for _, n := range list.Items {
		last[n.Name] = slipwayState(&n)
	}
	w, err := f.Kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: "fleet=" + f.NS, ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok || ev.Type != watch.Modified {
				continue
			}
			mu.Lock()
			if s := slipwayState(n); s != last[n.Name] {
				last[n.Name] = s
				counts[n.Name]++
			}
			mu.Unlock()
		}
	}()
	return func() map[string]int {
		cancel()
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(counts)
	}
}

// TestNodeKeptLean: through a rollout, the Nodes carry at rest slipway's
// version labels and nothing else of it, and slipway writes each Node
// twice per upgrade (the controller's cordon, the agent's uncordon with
// the version labels); the counts and the bytes of slipway's part of a
// Node are logged.
func TestNodeKeptLean(t *testing.T) {
	t.Parallel()
	const nodes = 3
	f := newFleet(t, nodes, nil)
	names := make([]string, nodes)
	for i := range names {
		names[i] = f.NS + "-n" + string(rune('0'+i))
		f.Start(names[i])
	}
	f.AgentsUp(names...)
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v1", Concurrency: 1, RebootDelay: fleettest.ZeroDelay(), NodeSelector: f.Selector()})
	f.WaitFor("every node at v1, the channel complete", time.Minute, fleettest.Done(nodes))
	for _, n := range names {
		f.waitLean(t, n)
	}
	before := f.partAtRest(t, names)
	stop := f.nodeWrites(t)
	f.Patch(`{"spec":{"version":"v2"}}`)
	f.WaitFor("every node at v2", 3*time.Minute, func(ch *v1.UpdateChannel) bool {
		return ch.Status.ObservedGeneration == ch.Generation && fleettest.Done(nodes)(ch)
	})
	f.AssertAllAt("v2")
	for _, n := range names {
		f.waitLean(t, n)
	}
	writes := stop()
	after := f.partAtRest(t, names)
	total := 0
	for _, n := range names {
		total += writes[n]
	}
	t.Logf("slipway's part of a Node at rest: %d B before the rollout, %d B after (mean of %d nodes); slipway's Node writes per node upgraded: %.1f (%v)",
		before, after, nodes, float64(total)/nodes, writes)
	for _, n := range names {
		if writes[n] > 2 {
			t.Errorf("node %s: %d writes of slipway's part of its Node for one upgrade, want 2 (the cordon, the uncordon with the version labels)", n, writes[n])
		}
		labels, annotations := f.slipwayKeys(t, n)
		if want := []string{protocol.LabelKernelVersion, protocol.LabelRootfsVersion}; !slices.Equal(labels, want) || len(annotations) > 0 {
			t.Errorf("node %s at rest carries labels %v and annotations %v of slipway's, want the labels %v alone", n, labels, annotations, want)
		}
	}
}

// waitLean waits until node's versions are in its NodeUpdate alone (versionsWhere).
func (f *fleet) waitLean(t *testing.T, node string) { f.waitVersions(t, node, "status") }

// partAtRest is the mean of slipway's part of the Nodes named (slipwayPart).
func (f *fleet) partAtRest(t *testing.T, names []string) int {
	t.Helper()
	sum := 0
	for _, n := range names {
		node, err := f.Kube.CoreV1().Nodes().Get(context.Background(), n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sum += slipwayPart(node)
	}
	return sum / len(names)
}

// TestControllerWatchesNodesOnce: the controller holds one watch of the
// Nodes, not two (every Node event reaches each watcher of Nodes: a second
// watch doubles what the API server sends it for every Node write of the
// fleet), through a rollout.
func TestControllerWatchesNodesOnce(t *testing.T) {
	t.Parallel()
	watches := fleettest.NewWatchCounter()
	f := newFleet(t, 1, func(o *Options) {
		if o.Config != nil {
			o.Config = rest.CopyConfig(o.Config)
			o.Config.Wrap(watches.Wrap)
		}
	})
	node := f.NS + "-n0"
	f.Start(node)
	f.AgentsUp(node)
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v1", Concurrency: 1, RebootDelay: fleettest.ZeroDelay(), NodeSelector: f.Selector()})
	f.WaitFor("the node at v1, the channel complete", time.Minute, fleettest.Done(1))
	f.Patch(`{"spec":{"version":"v2"}}`)
	f.WaitFor("the node at v2", 2*time.Minute, func(ch *v1.UpdateChannel) bool {
		return ch.Status.ObservedGeneration == ch.Generation && fleettest.Done(1)(ch)
	})
	if _, most := watches.Counts(); most["nodes"] != 1 {
		t.Errorf("the controller held %d watches of the Nodes at once, want 1", most["nodes"])
	}
}
