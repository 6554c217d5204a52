package controller

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
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
