package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/protocol"
)

// TestServersOneAtATimeFirst: with concurrency 4, the two control-plane
// nodes (one labelled etcd) upgrade one at a time, each alone, before any
// of the three others starts; the others then go together.
func TestServersOneAtATimeFirst(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5, nil)
	n := func(i int) string { return fmt.Sprintf("%s-n%d", f.NS, i) }
	servers := map[string]bool{n(3): true, n(4): true}
	for node, role := range map[string]string{n(3): "node-role.kubernetes.io/control-plane", n(4): "node-role.kubernetes.io/etcd"} {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, role)
		if _, err := f.Kube.CoreV1().Nodes().Patch(context.Background(), node, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := f.Ops.OpsV1().UpdateChannels(f.NS).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order, bad []string
	maxWorkers := 0
	seen := map[string]bool{}
	go func() {
		for ev := range w.ResultChan() {
			ch, ok := ev.Object.(*v1.UpdateChannel)
			if !ok {
				continue
			}
			mu.Lock()
			serverSlots, workers := 0, 0
			for _, s := range ch.Status.Updating {
				if servers[s.Node] {
					serverSlots++
				} else {
					workers++
				}
				if !seen[s.Node] {
					seen[s.Node] = true
					order = append(order, s.Node)
				}
			}
			if serverSlots > 0 && len(ch.Status.Updating) > 1 {
				bad = append(bad, fmt.Sprintf("a server upgraded beside another node: %+v", ch.Status.Updating))
			}
			maxWorkers = max(maxWorkers, workers)
			mu.Unlock()
		}
	}()
	for i := range 5 {
		f.Start(n(i))
	}
	f.AgentsUp(n(0), n(1), n(2), n(3), n(4))
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", Concurrency: 4, RebootDelay: fleettest.ZeroDelay(), NodeSelector: f.Selector()})
	f.WaitFor("all five at v2", 2*time.Minute, fleettest.Done(5))
	cancel()
	mu.Lock()
	defer mu.Unlock()
	for _, b := range bad {
		t.Error(b)
	}
	if len(order) != 5 || !servers[order[0]] || !servers[order[1]] {
		t.Errorf("slot order %v: want the two servers first", order)
	}
	if maxWorkers < 2 {
		t.Errorf("the other nodes never upgraded side by side (most at once %d): concurrency 4 must apply to them", maxWorkers)
	}
	f.AssertAllAt("v2")
}

// TestOneServerDownAcrossChannels (issue 21 item 7): a canary channel
// beside the default one, each with a server node, both rolling out at
// once: at no instant are two server nodes cordoned by slipway.
func TestOneServerDownAcrossChannels(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 4, nil)
	n := func(i int) string { return fmt.Sprintf("%s-n%d", f.NS, i) }
	servers := map[string]bool{n(0): true, n(1): true}
	for i, ch := range []string{"main", "canary", "main", "canary"} {
		labels := fmt.Sprintf(`"slipway.dev/channel":%q`, ch)
		if servers[n(i)] {
			labels += `,"node-role.kubernetes.io/control-plane":"true"`
		}
		if _, err := f.Kube.CoreV1().Nodes().Patch(context.Background(), n(i), "application/merge-patch+json",
			[]byte(`{"metadata":{"labels":{`+labels+`}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := f.Kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: "fleet=" + f.NS})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	down, most := map[string]bool{}, 0
	go func() {
		for ev := range w.ResultChan() {
			node, ok := ev.Object.(*corev1.Node)
			if !ok || !servers[node.Name] {
				continue
			}
			mu.Lock()
			down[node.Name] = drain.CordonedBy(node.Annotations) == protocol.CordonOwner
			count := 0
			for _, d := range down {
				if d {
					count++
				}
			}
			most = max(most, count)
			mu.Unlock()
		}
	}()
	for i := range 4 {
		f.Start(n(i))
	}
	spec := func(channel string) v1.UpdateChannelSpec {
		return v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: &metav1.Duration{Duration: 2 * time.Second},
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS, "slipway.dev/channel": channel}}}
	}
	f.Channel(spec("main"))
	canary := &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "canary", Namespace: f.NS}, Spec: spec("canary")}
	if _, err := f.Ops.OpsV1().UpdateChannels(f.NS).Create(context.Background(), canary, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.WaitFor("the main channel's two nodes at v2", 2*time.Minute, fleettest.Done(2))
	deadline := time.Now().Add(2 * time.Minute)
	for {
		c, err := f.Ops.OpsV1().UpdateChannels(f.NS).Get(context.Background(), "canary", metav1.GetOptions{})
		if err == nil && fleettest.Done(2)(c) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the canary never finished: %+v", c.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	mu.Lock()
	defer mu.Unlock()
	if most != 1 {
		t.Errorf("at most %d server nodes were cordoned at once across the two channels, want 1", most)
	}
	f.AssertAllAt("v2")
}

// TestDownServerHoldsTheOthersBack: of three control-plane nodes, one is
// down without a slot (its kubelet stopped reporting: Ready Unknown). No
// other server takes a slot while it is down, and an Event names it; once
// it is Ready again the three upgrade, one at a time.
func TestDownServerHoldsTheOthersBack(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 3, nil)
	n := func(i int) string { return fmt.Sprintf("%s-n%d", f.NS, i) }
	for i := range 3 {
		if err := f.PatchNodeLabel(n(i), "node-role.kubernetes.io/control-plane", "true"); err != nil {
			t.Fatal(err)
		}
	}
	f.Fleet.SetReady(n(0), false)
	for i := range 3 {
		f.Start(n(i))
	}
	f.AgentsUp(n(0), n(1), n(2))
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", Concurrency: 3, RebootDelay: fleettest.ZeroDelay(), NodeSelector: f.Selector()})
	if got := f.Events("ServerHeldBack", 1); got < 1 {
		t.Fatalf("no ServerHeldBack Event; status %+v", f.Get().Status)
	}
	l, err := f.Kube.CoreV1().Events(f.NS).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=ServerHeldBack"})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) == 0 || !strings.Contains(l.Items[0].Message, n(0)) {
		t.Errorf("the ServerHeldBack Event must name the down server %s: %+v", n(0), l.Items)
	}
	f.Holds("no server slot while a server is down", 5*time.Second, func(ch *v1.UpdateChannel) bool { return len(ch.Status.Updating) == 0 })
	f.Fleet.SetReady(n(0), true)
	f.WaitFor("all three at v2", 2*time.Minute, fleettest.Done(3))
	f.AssertAllAt("v2")
}

// TestServerDownAfterTheGrantHoldsTheDrain: of three control-plane nodes
// at concurrency 1, one is granted its slot while all are up; another
// goes NotReady before the first's drain. The drain asks the server gate
// again: the first keeps its slot, uncordoned, an Event names it and the
// down server, and it drains only once that server is back.
func TestServerDownAfterTheGrantHoldsTheDrain(t *testing.T) {
	t.Parallel()
	f, first, down, releaseFirst := grantedOne(t, true)
	f.Fleet.SetReady(down, false) // after the grant, before the drain
	releaseFirst(true)            // the Job staged the swap: the node asks for its drain
	eventSays(t, f.Fleet, "ServerHeldBack", first, down, "drain")
	f.Holds("the first server keeps its slot while another is down", 6*time.Second, func(ch *v1.UpdateChannel) bool {
		return len(ch.Status.Updating) == 1 && ch.Status.Updating[0].Node == first
	})
	if node := f.Node(first); node.Spec.Unschedulable || drain.CordonedBy(node.Annotations) != "" {
		t.Fatalf("server %s was cordoned while server %s is NotReady: two servers down", first, down)
	}
	f.Fleet.SetReady(down, true)
	f.WaitFor("all three at v2", 2*time.Minute, fleettest.Done(3))
	f.AssertAllAt("v2")
}

// grantedOne starts three nodes (control-plane nodes when servers) with
// their slot Jobs held, a channel of concurrency 1, and waits for its
// first slot. It returns the fleet, the first slot's node, another node,
// and what runs the first's Job (the others' run when they come).
func grantedOne(t *testing.T, servers bool) (f *fleet, first, other string, releaseFirst func(bool)) {
	t.Helper()
	return grantedOneWith(t, servers, nil)
}

// grantedOneWith is grantedOne with the controller's Options edited.
func grantedOneWith(t *testing.T, servers bool, edit func(*Options)) (f *fleet, first, other string, releaseFirst func(bool)) {
	t.Helper()
	f = newFleet(t, 3, edit)
	n := func(i int) string { return fmt.Sprintf("%s-n%d", f.NS, i) }
	release := map[string]func(bool){}
	for i := range 3 {
		if servers {
			if err := f.PatchNodeLabel(n(i), "node-role.kubernetes.io/control-plane", "true"); err != nil {
				t.Fatal(err)
			}
		}
		release[n(i)] = f.HoldJobs(n(i))
		f.Start(n(i))
	}
	f.AgentsUp(n(0), n(1), n(2))
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", Concurrency: 1, RebootDelay: fleettest.ZeroDelay(), NodeSelector: f.Selector()})
	ch := f.WaitFor("a slot", 2*time.Minute, func(ch *v1.UpdateChannel) bool { return len(ch.Status.Updating) == 1 })
	first = ch.Status.Updating[0].Node
	for i := range 3 {
		if n(i) != first {
			other = n(i)
			release[n(i)](true) // buffered: their Jobs run when they come
		}
	}
	return f, first, other, release[first]
}

// TestServerDownMidDrainHoldsTheReboot: a server's drain has begun (a
// budget refuses its pod's eviction) when another server goes NotReady.
// Once the drain is done, the pass that would permit its reboot asks the
// server gate again: the slot is not marked Rebooting, an Event names both
// servers, and it reboots only once the other is back.
func TestServerDownMidDrainHoldsTheReboot(t *testing.T) {
	t.Parallel()
	f, first, down, releaseFirst := grantedOne(t, true)
	f.BlockEviction(t, first)
	releaseFirst(true)
	f.WaitNode(t, first, "cordoned for its drain", func(nd *corev1.Node) bool { return drain.CordonedBy(nd.Annotations) == protocol.CordonOwner })
	f.Fleet.SetReady(down, false) // mid-drain
	zero := int64(0)              // the guarded pod gone (no kubelet here to end it): the drain is done
	if err := f.Kube.CoreV1().Pods(f.NS).Delete(context.Background(), "guarded", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	f.Holds("no reboot permitted while another server is down", 8*time.Second, func(ch *v1.UpdateChannel) bool {
		return len(ch.Status.Updating) == 1 && ch.Status.Updating[0].Node == first && ch.Status.Updating[0].Phase != "Rebooting"
	})
	eventSays(t, f.Fleet, "ServerHeldBack", first, down, "reboot")
	f.Fleet.SetReady(down, true)
	f.WaitFor("all three at v2", 3*time.Minute, fleettest.Done(3))
	f.AssertAllAt("v2")
}
