package controller

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// TestSlotTakenAwayLeavesItsViewFirst: a slot the controller takes away
// (here released: its node's agent fell silent before its reboot) is gone
// from that node's view (on its Node or in its NodeUpdate) before the capacity it frees is
// granted to another node. Otherwise a reboot the first node retries in
// between confirms against its stale view, and two nodes are down with
// concurrency 1. The order is read from the API server's resource
// versions (one etcd: they grow with every write).
func TestSlotTakenAwayLeavesItsViewFirst(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 2, func(o *Options) { o.HeartbeatInterval = 3 * time.Second })
	a, b := agentFallsSilent(t, f)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var viewGone, granted uint64 // the resource versions of the first write of each
	nodes, err := f.Kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + a})
	if err != nil {
		t.Fatal(err)
	}
	chans, err := f.Ops.OpsV1().UpdateChannels(f.NS).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The view is on the Node until a's agent announced that it reads its
	// NodeUpdate, in the NodeUpdate's spec after: watch both.
	updates, err := f.Ops.OpsV1().NodeUpdates(f.NS).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + protocol.NodeUpdateName(a)})
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]bool{}
	saw := func(where string, showsSlot bool, rv string) {
		mu.Lock()
		defer mu.Unlock()
		if showsSlot {
			held[where] = true
		} else if held[where] && viewGone == 0 {
			viewGone, _ = strconv.ParseUint(rv, 10, 64)
		}
	}
	go func() {
		for ev := range nodes.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			showsSlot := false
			for k, val := range n.Annotations {
				if v, err := protocol.ParseView(val); err == nil && strings.HasPrefix(k, protocol.AnnotationChannelViewPrefix) && v.Slot != nil {
					showsSlot = true
				}
			}
			saw("node", showsSlot, n.ResourceVersion)
		}
	}()
	go func() {
		for ev := range updates.ResultChan() {
			u, ok := ev.Object.(*v1.NodeUpdate)
			if !ok {
				continue
			}
			showsSlot := false
			for _, c := range u.Spec.Channels {
				showsSlot = showsSlot || c.Slot != nil
			}
			saw("nodeupdate", showsSlot, u.ResourceVersion)
		}
	}()
	go func() {
		for ev := range chans.ResultChan() {
			ch, ok := ev.Object.(*v1.UpdateChannel)
			if !ok {
				continue
			}
			mu.Lock()
			if granted == 0 && plan.FindSlot(ch.Status, b) >= 0 {
				granted, _ = strconv.ParseUint(ch.ResourceVersion, 10, 64)
			}
			mu.Unlock()
		}
	}()
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(),
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS, "pick": "yes"}}})
	f.WaitFor("the slot of "+a+" claimed", time.Minute, func(ch *v1.UpdateChannel) bool { return plan.FindSlot(ch.Status, a) >= 0 })
	if err := f.PatchNodeLabel(b, "pick", "yes"); err != nil {
		t.Fatal(err)
	}
	f.WaitFor("the slot released and "+b+" at v2", 2*time.Minute, func(ch *v1.UpdateChannel) bool {
		return plan.FindSlot(ch.Status, a) < 0 && ch.Status.Counts.UpToDate == 1 && len(ch.Status.Updating) == 0
	})
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		g, v := granted, viewGone
		mu.Unlock()
		if g != 0 && v != 0 {
			if g < v {
				t.Errorf("%s was granted a slot (resource version %d) before %s's view stopped showing the slot taken away from it (%d)", b, g, a, v)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not seen: the grant to %s (%d) and the view of %s without its slot (%d)", b, g, a, v)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// agentFallsSilent starts the agents of f's two nodes, a picked by the
// channel's selector ("pick": "yes"), b not yet, and stops a's: a's slot
// is claimed, then released when its heartbeat is too old.
func agentFallsSilent(t *testing.T, f *fleet) (a, b string) {
	t.Helper()
	a, b = f.NS+"-n0", f.NS+"-n1"
	if err := f.PatchNodeLabel(a, "pick", "yes"); err != nil {
		t.Fatal(err)
	}
	f.Start(a)
	f.Start(b)
	f.AgentsUp(a, b)
	f.Stop(a)
	return a, b
}
