package controller

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// TestRebootingShownBeforeTheStatusWrite: a drain done shows its slot
// Rebooting in the node's view at once, not after the pass that marks the
// status so (showdrained.go). Every status write of the controller is
// slowed by 400 ms: the view shows Rebooting at an earlier resourceVersion
// than the status does; the status still records it, the node is drained
// once and ends at the target.
func TestRebootingShownBeforeTheStatusWrite(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, func(o *Options) {
		if o.Config != nil { // the controller's (the agents' options carry none)
			cfg := rest.CopyConfig(o.Config)
			cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return slowStatusWrites{rt, 400 * time.Millisecond} })
			o.Config = cfg
		}
	})
	node := f.NS + "-n0"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := rebootingSeen(ctx, t, f, node)
	f.Start(node)
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(),
		Drain: &v1.DrainSpec{Timeout: &metav1.Duration{Duration: time.Minute}}, NodeSelector: f.Selector()})
	f.WaitFor("the node upgraded", 2*time.Minute, fleettest.Done(1))
	f.AssertAllAt("v2")
	view, status := first()
	switch {
	case status == 0:
		t.Errorf("the status never showed the slot Rebooting: the pass must still record it")
	case view == 0:
		t.Errorf("the node's view never showed its slot Rebooting")
	case view > status:
		t.Errorf("the view showed Rebooting at resourceVersion %d, after the status did at %d: the node waited for the pass's status write", view, status)
	}
	if got := f.drainsLogged(node); got != 1 {
		t.Errorf("drained %d times for one slot, want 1", got)
	}
}

// slowStatusWrites delays every write of an UpdateChannel's status before
// it is sent.
type slowStatusWrites struct {
	next  http.RoundTripper
	delay time.Duration
}

func (s slowStatusWrites) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/updatechannels/") && strings.HasSuffix(r.URL.Path, "/status") {
		time.Sleep(s.delay)
	}
	return s.next.RoundTrip(r)
}

// rebootingSeen watches the fleet's channels and NodeUpdates; the function
// it returns gives the first resourceVersion at which node's view showed
// its slot Rebooting, and the first at which the channel's status did
// (0: not seen).
func rebootingSeen(ctx context.Context, t *testing.T, f *fleet, node string) func() (view, status uint64) {
	t.Helper()
	var mu sync.Mutex
	var view, status uint64
	cw, err := f.Ops.OpsV1().UpdateChannels(f.NS).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uw, err := f.Ops.OpsV1().NodeUpdates(f.NS).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + protocol.NodeUpdateName(node)})
	if err != nil {
		t.Fatal(err)
	}
	note := func(at *uint64, rv string) {
		n, _ := strconv.ParseUint(rv, 10, 64)
		mu.Lock()
		if *at == 0 {
			*at = n
		}
		mu.Unlock()
	}
	go func() {
		for ev := range cw.ResultChan() {
			if ch, ok := ev.Object.(*v1.UpdateChannel); ok {
				if i := plan.FindSlot(ch.Status, node); i >= 0 && ch.Status.Updating[i].Phase == plan.PhaseRebooting {
					note(&status, ch.ResourceVersion)
				}
			}
		}
	}()
	go func() {
		for ev := range uw.ResultChan() {
			if u, ok := ev.Object.(*v1.NodeUpdate); ok {
				for _, v := range protocol.ViewsOfSpec(u.Spec, f.NS) {
					if v.Slot != nil && v.Slot.Phase == plan.PhaseRebooting {
						note(&view, u.ResourceVersion)
					}
				}
			}
		}
	}()
	return func() (uint64, uint64) {
		time.Sleep(time.Second) // the watches' last events
		mu.Lock()
		defer mu.Unlock()
		return view, status
	}
}

// TestDrainStartsWithoutAPass: a node's request for its drain (its slot
// reported Draining) starts the drain at once, not in the pass the report
// wakes (startAskedDrains): with the controller's one fleet worker held
// in another channel's status write, the node is cordoned and drained all
// the same, and once the worker goes on the rollout ends.
func TestDrainStartsWithoutAPass(t *testing.T) {
	t.Parallel()
	held, release := make(chan struct{}, 1), make(chan struct{})
	f := newFleet(t, 1, func(o *Options) {
		if o.Config != nil { // the controller's
			cfg := rest.CopyConfig(o.Config)
			cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return holdStatusWrites{rt, "held", held, release} })
			o.Config = cfg
		}
	})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	node := f.NS + "-n0"
	f.Start(node)
	f.AgentsUp(node)
	f.Stop(node) // its slot is granted while it is away
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(),
		Drain: &v1.DrainSpec{Timeout: &metav1.Duration{Duration: time.Minute}}, NodeSelector: f.Selector()})
	f.WaitFor("the node's slot granted", time.Minute, func(ch *v1.UpdateChannel) bool { return plan.FindSlot(ch.Status, node) >= 0 })
	other := &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: f.NS}, Spec: v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2",
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"no-such-label": "x"}}}}
	if _, err := f.Ops.OpsV1().UpdateChannels(f.NS).Create(context.Background(), other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held: // the fleet worker waits in that channel's status write
	case <-time.After(time.Minute):
		t.Fatal("no status write of the other channel within a minute")
	}
	f.Start(node)
	f.WaitNode(t, node, "cordoned by the controller's drain while the fleet worker is held", func(n *corev1.Node) bool {
		return n.Spec.Unschedulable && drain.CordonedBy(n.Annotations) == protocol.CordonOwner
	})
	close(release)
	f.WaitFor("the node upgraded", 2*time.Minute, func(ch *v1.UpdateChannel) bool {
		return ch.Status.Counts.UpToDate == 1 && len(ch.Status.Updating) == 0
	})
	f.WaitNode(t, node, "uncordoned", func(n *corev1.Node) bool { return !n.Spec.Unschedulable })
}

// holdStatusWrites holds the status writes of channel name until release
// closes, saying on held when the first one waits.
type holdStatusWrites struct {
	next    http.RoundTripper
	name    string
	held    chan<- struct{}
	release <-chan struct{}
}

func (h holdStatusWrites) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/updatechannels/"+h.name+"/status") {
		select {
		case h.held <- struct{}{}:
		default:
		}
		<-h.release
	}
	return h.next.RoundTrip(r)
}
