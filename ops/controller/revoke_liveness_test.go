package controller

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// refusedViews fails the controller's writes of one node's views (its
// Node's annotations, its NodeUpdate's spec) while on, at once and before
// they reach the API server, as an API server that refuses them would:
// every other request goes through.
type refusedViews struct {
	paths   []string // the URL paths of the node's Node and NodeUpdate
	on      atomic.Bool
	refused atomic.Int64
}

func (r *refusedViews) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if r.on.Load() && req.Method != http.MethodGet && slices.ContainsFunc(r.paths, func(p string) bool { return strings.HasSuffix(req.URL.Path, p) }) {
			r.refused.Add(1)
			return nil, errors.New("refused by the test: the view writes of this node fail")
		}
		return rt.RoundTrip(req)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestRevokedSlotGrantedSoonAfterItsViewLands: a slot taken away while
// the writes of its node's view fail keeps its capacity (no grant while
// the view still shows the slot), and once the writes go through again
// the capacity is granted within a bound, however many writes failed
// before: neither the view queue's per-node backoff nor the channel's
// holds the channel's next pass back for long. The bound is a deadline
// for a stuck rollout, not a timing asserted.
func TestRevokedSlotGrantedSoonAfterItsViewLands(t *testing.T) {
	t.Parallel()
	refuse := &refusedViews{}
	f := newFleet(t, 2, func(o *Options) {
		o.HeartbeatInterval = 3 * time.Second
		if o.Config != nil {
			o.Config = rest.CopyConfig(o.Config)
			o.Config.Wrap(refuse.wrap)
		}
	})
	a, b := agentFallsSilent(t, f)
	refuse.paths = []string{"/nodes/" + a, "/namespaces/" + f.NS + "/nodeupdates/" + protocol.NodeUpdateName(a)}

	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(),
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS, "pick": "yes"}}})
	// Its view shows the slot before the writes fail: a slot never shown
	// needs no fence.
	f.waitSlotShown(t, a)
	refuse.on.Store(true)
	if err := f.PatchNodeLabel(b, "pick", "yes"); err != nil {
		t.Fatal(err)
	}
	f.WaitFor("the slot of "+a+" released", 2*time.Minute, func(ch *v1.UpdateChannel) bool { return plan.FindSlot(ch.Status, a) < 0 })
	// Many writes fail in a row (each at once, so the per-item backoff
	// grows fast): 20 s of them put an unbounded backoff's next retry
	// seconds to minutes away.
	failing := refuse.refused.Load()
	time.Sleep(20 * time.Second)
	if n := refuse.refused.Load() - failing; n < 5 {
		t.Fatalf("only %d writes of %s's view failed after its slot was released: the case was not exercised", n, a)
	}
	ch := f.Get()
	if i := plan.FindSlot(ch.Status, b); i >= 0 {
		t.Fatalf("%s was granted a slot while %s's view still showed the slot taken away from it", b, a)
	}
	if !viewShowsSlot(t, f, a) {
		t.Fatalf("the view of %s no longer shows its slot although every write of it failed", a)
	}
	refuse.on.Store(false)
	lifted := time.Now()
	f.WaitFor(b+" granted a slot once "+a+"'s view can be written", time.Minute, func(ch *v1.UpdateChannel) bool {
		return plan.FindSlot(ch.Status, b) >= 0 || ch.Status.Counts.UpToDate >= 1
	})
	t.Logf("%d writes of %s's view refused; %s granted %s after they went through again", refuse.refused.Load(), a, b, time.Since(lifted).Round(time.Millisecond))
}

// waitSlotShown waits for node's slot to be claimed and shown in its view.
func (f *fleet) waitSlotShown(t *testing.T, node string) {
	t.Helper()
	f.WaitFor("the slot of "+node+" claimed", time.Minute, func(ch *v1.UpdateChannel) bool { return plan.FindSlot(ch.Status, node) >= 0 })
	deadline := time.Now().Add(time.Minute)
	for !viewShowsSlot(t, f, node) {
		if time.Now().After(deadline) {
			t.Fatalf("the view of %s never showed its slot", node)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// viewShowsSlot tells whether node's view gives it a slot: on its Node
// until its agent announced that it reads its NodeUpdate, there after.
func viewShowsSlot(t *testing.T, f *fleet, node string) bool {
	t.Helper()
	n, err := f.Kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, val := range n.Annotations {
		if v, err := protocol.ParseView(val); err == nil && strings.HasPrefix(k, protocol.AnnotationChannelViewPrefix) && v.Slot != nil {
			return true
		}
	}
	u, err := f.Ops.OpsV1().NodeUpdates(f.NS).Get(context.Background(), protocol.NodeUpdateName(node), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false // not created yet
	} else if err != nil {
		t.Fatal(err)
	}
	for _, c := range u.Spec.Channels {
		if c.Slot != nil {
			return true
		}
	}
	return false
}
