package controller

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// viewsFleet is a controller's caches in the middle of a rollout over n
// nodes whose agents read their NodeUpdates: ten nodes hold a slot, the
// first half upgraded (their NodeUpdate still shows the slot they
// reported ended, which needs no write), the rest wait. Every view is
// current, so a pass queues no node.
func viewsFleet(tb testing.TB, n int) (*Controller, *v1.UpdateChannel, []plan.Node) {
	tb.Helper()
	const ns = "slipway-system"
	since := metav1.NewTime(time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC))
	ch := &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet", UID: "ch-uid", CreationTimestamp: since},
		Spec: v1.UpdateChannelSpec{URL: "https://releases.example.com/channel", Version: "v2"}}
	ctl := &Controller{opts: Options{Namespace: ns}, views: map[types.UID]map[string]string{}, fleet: map[string]*fleetCache{},
		objectWrites: map[string]objectWritten{}, nodes: cache.NewStore(cache.MetaNamespaceKeyFunc), nodeUpdates: cache.NewStore(cache.MetaNamespaceKeyFunc)}
	ctl.viewQueue = newViewQueue(ctl.slotNodes.holds)
	tb.Cleanup(ctl.viewQueue.ShutDown)
	var follows []plan.Node
	for i := range n {
		name := fmt.Sprintf("node-%05d", i)
		follows = append(follows, plan.Node{Name: name})
		if i >= n/2 && i < n/2+10 {
			ch.Status.Updating = append(ch.Status.Updating, v1.Slot{Node: name, Version: "v2", Phase: plan.PhaseUpgrading, Attempt: 1, Since: since})
		}
	}
	for i, f := range follows {
		u := &v1.NodeUpdate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: f.Name, ResourceVersion: fmt.Sprint(1000 + i)},
			Status: v1.NodeUpdateStatus{Protocol: protocol.NodeUpdateProtocol}}
		view, _ := plan.ViewOf(ch, f.Name, true)
		if i < n/2 { // upgraded: its view still shows the slot it reported ended
			ended := v1.Slot{Node: f.Name, Version: "v2", Phase: plan.PhaseUpgrading, Attempt: 1, Since: since}
			view.Slot = &ended
			u.Status.Reports = []v1.NodeReport{{UID: ch.UID, SlotReport: v1.SlotReport{Since: since, Attempt: 1, Version: "v2", Phase: plan.PhaseRebooting, Outcome: protocol.OutcomeSucceeded}}}
		}
		u.Spec = protocol.SpecOf(map[types.UID]protocol.View{ch.UID: view})
		for _, add := range []error{ctl.nodeUpdates.Add(u),
			ctl.nodes.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: f.Name, ResourceVersion: fmt.Sprint(1 + i)}})} {
			if add != nil {
				tb.Fatal(add)
			}
		}
	}
	return ctl, ch, follows
}

// BenchmarkSetViews is the view part of one fleet pass (setViews) over a
// fleet mid-rollout, every view current.
func BenchmarkSetViews(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			ctl, ch, follows := viewsFleet(b, n)
			for b.Loop() {
				ctl.setViews(ch, follows)
			}
			if q := ctl.viewQueue.Len(); q != 0 {
				b.Fatalf("%d nodes queued for a view write; the fixture's views are all current", q)
			}
		})
	}
}

// TestSetViewsQueuesOnlyTheNodesDue: in a fleet whose views are all
// current, a pass queues none; a node whose slot changed (the channel
// shows it Rebooting, its NodeUpdate Upgrading) and a node whose ended
// slot's report is gone from its status are queued, and only they.
func TestSetViewsQueuesOnlyTheNodesDue(t *testing.T) {
	ctl, ch, follows := viewsFleet(t, 40)
	ctl.setViews(ch, follows)
	if q := ctl.viewQueue.Len(); q != 0 {
		t.Fatalf("%d nodes queued in a fleet whose views are current", q)
	}
	ch.Status.Updating[0].Phase = plan.PhaseRebooting // node-00020
	u := ctl.nodeUpdateOf("node-00003").DeepCopy()
	u.Status.Reports, u.ResourceVersion = nil, "5000" // its slot no longer reported ended: the view must lose it
	if err := ctl.nodeUpdates.Update(u); err != nil {
		t.Fatal(err)
	}
	ctl.setViews(ch, follows)
	got := map[string]bool{}
	for ctl.viewQueue.Len() > 0 {
		n, _ := ctl.viewQueue.Get()
		got[n] = true
		ctl.viewQueue.Done(n)
	}
	want := map[string]bool{"node-00020": true, "node-00003": true}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("queued %v, want %v", got, want)
	}
}
