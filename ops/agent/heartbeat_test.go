package agent

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/protocol"
)

// leaseRequests counts the agent's requests on one Lease by method.
type leaseRequests struct {
	path string
	mu   sync.Mutex
	by   map[string]int
}

func (c *leaseRequests) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Path == c.path {
			c.mu.Lock()
			c.by[r.Method]++
			c.mu.Unlock()
		}
		return rt.RoundTrip(r)
	})
}

func (c *leaseRequests) count(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.by[method]
}

// TestHeartbeatRenewalIsOneRequest: the agent renews its heartbeat Lease
// with one update of the Lease as it last wrote it, not a read and an
// update each time (5,000 nodes renewing each minute are 83 reads a second
// saved); when another writer changed the Lease the update is refused as
// stale, and the agent reads it again and goes on renewing.
func TestHeartbeatRenewalIsOneRequest(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	node := f.NS + "-n0"
	name := protocol.AgentLeaseName(node)
	reqs := &leaseRequests{path: "/apis/coordination.k8s.io/v1/namespaces/" + f.NS + "/leases/" + name, by: map[string]int{}}
	f.opts = func(o *Options) {
		// The Lease's duration, three intervals, is in whole seconds;
		// the idle agent renews every protocol.IdleHeartbeats of them.
		o.HeartbeatInterval = time.Second
		if o.Config != nil { // the agent's own client only
			cfg := rest.CopyConfig(o.Config)
			cfg.Wrap(reqs.wrap)
			o.Config = cfg
		}
	}
	f.Start(node)
	waitUntil(t, 2*time.Minute, "ten renewals", func() bool { return reqs.count(http.MethodPut) >= 10 })
	if gets := reqs.count(http.MethodGet); gets > 1 {
		t.Errorf("%d reads of the heartbeat Lease for %d renewals: want the first one at most", gets, reqs.count(http.MethodPut))
	}

	// Another writer changes the Lease: the agent's next update is stale.
	ctx := context.Background()
	api := f.Kube.CoordinationV1().Leases(f.NS)
	l, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other := "someone-else"
	l.Spec.HolderIdentity = &other
	if l, err = api.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	written := l.Spec.RenewTime.Time
	waitUntil(t, 2*time.Minute, "the agent renewing again", func() bool {
		l, err := api.Get(ctx, name, metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == node && l.Spec.RenewTime.After(written)
	})
}

func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
	}
}

// TestIdleAgentBeatsSlowlyUntilAsked: an agent that no channel asks
// anything of renews its heartbeat every protocol.IdleHeartbeats
// intervals and says so in its Lease (a duration of three of them); a
// channel that gives its node a target it does not run makes it renew at
// once with the short duration, long before its next idle renewal was
// due, and the node upgrades. After the rollout it is idle again.
func TestIdleAgentBeatsSlowlyUntilAsked(t *testing.T) {
	t.Parallel()
	interval := time.Minute // idle: 5 min
	f := newFleet(t, 1, func(o *Options) { o.HeartbeatInterval = interval })
	node := f.NS + "-n0"
	f.Start(node)
	f.AgentsUp(node)
	idle, busy := int32(3*protocol.IdleHeartbeat(interval).Seconds()), int32(3*interval.Seconds())
	lease := func() (int32, time.Time) {
		l, err := f.Kube.CoordinationV1().Leases(f.NS).Get(context.Background(), protocol.AgentLeaseName(node), metav1.GetOptions{})
		if err != nil || l.Spec.LeaseDurationSeconds == nil || l.Spec.RenewTime == nil {
			return 0, time.Time{}
		}
		return *l.Spec.LeaseDurationSeconds, l.Spec.RenewTime.Time
	}
	var idleAt time.Time // the agent's clock, this machine's
	waitUntil(t, time.Minute, "the idle agent's Lease duration", func() bool {
		d, at := lease()
		idleAt = at
		return d == idle
	})
	// An admin's cordon keeps the slot away: the target alone asks for
	// work, and no reboot starts a new agent process (whose first renewal
	// would be busy with or without a wake).
	setUnschedulable := func(on bool) {
		patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
		if _, err := f.Kube.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setUnschedulable(true)
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(),
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS}}})
	var busyAt time.Time
	waitUntil(t, protocol.IdleHeartbeat(interval)+30*time.Second, "a renewal with the busy duration", func() bool {
		d, at := lease()
		busyAt = at
		return d == busy
	})
	// Its next idle renewal was due 5 min after the last: only a renewal
	// the work woke comes well before (even behind a stalled API server).
	if waited := busyAt.Sub(idleAt); waited > protocol.IdleHeartbeat(interval)-time.Minute {
		t.Errorf("the busy renewal came %s after the idle one: the work did not wake the heartbeat", waited.Round(time.Second))
	}
	setUnschedulable(false)
	f.WaitFor("at v2", 2*time.Minute, fleettest.Done(1))
	waitUntil(t, 3*interval, "the idle duration again after the rollout", func() bool { d, _ := lease(); return d == idle })
}

// TestRestartRenewsOnceWithWhatTheCachesSay: an agent started while a
// channel asks something of its node (here after a restart, as after every
// reboot of a rollout) renews its heartbeat once, with the busy duration:
// its first renewal waits for the caches that say the node is asked
// something. A renewal before them, from an empty cache, has the idle
// duration and the caches' first events wake a second one at once: two
// writes where one does (the NodeUpdate's list is held back here, as a
// busy API server does, so the order does not depend on luck).
func TestRestartRenewsOnceWithWhatTheCachesSay(t *testing.T) {
	t.Parallel()
	interval := time.Minute
	var slowLists atomic.Bool
	f := newFleet(t, 1, nil)
	node := f.NS + "-n0"
	reqs := &leaseRequests{path: "/apis/coordination.k8s.io/v1/namespaces/" + f.NS + "/leases/" + protocol.AgentLeaseName(node), by: map[string]int{}}
	f.opts = func(o *Options) {
		o.HeartbeatInterval = interval
		if o.Config == nil { // the controller's options
			return
		}
		cfg := rest.CopyConfig(o.Config)
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return reqs.wrap(roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if slowLists.Load() && strings.HasSuffix(r.URL.Path, "/nodeupdates") { // the informer's list and watch
					time.Sleep(time.Second)
				}
				return rt.RoundTrip(r)
			}))
		})
		o.Config = cfg
	}
	f.Start(node)
	f.AgentsUp(node)
	// An admin's cordon keeps the slot away: the channel's target alone
	// asks something of the node, and nothing reboots it.
	if _, err := f.Kube.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(), NodeSelector: f.Selector()})
	busy := int32(3 * interval.Seconds())
	lease := func() (int32, time.Time) {
		l, err := f.Kube.CoordinationV1().Leases(f.NS).Get(context.Background(), protocol.AgentLeaseName(node), metav1.GetOptions{})
		if err != nil || l.Spec.LeaseDurationSeconds == nil || l.Spec.RenewTime == nil {
			return 0, time.Time{}
		}
		return *l.Spec.LeaseDurationSeconds, l.Spec.RenewTime.Time
	}
	waitUntil(t, 2*time.Minute, "the busy duration before the restart", func() bool { d, _ := lease(); return d == busy })

	slowLists.Store(true)
	before, restarted := reqs.count(http.MethodPut), time.Now()
	f.Restart(node, nil)
	waitUntil(t, time.Minute, "the restarted agent's first renewal", func() bool { _, at := lease(); return at.After(restarted) })
	time.Sleep(3 * time.Second) // a second renewal, if any, follows within the caches' first events
	if d, _ := lease(); d != busy {
		t.Errorf("the restarted agent's Lease has a duration of %d s, want the busy %d s", d, busy)
	}
	if n := reqs.count(http.MethodPut) - before; n != 1 {
		t.Errorf("the restarted agent renewed its Lease %d times within seconds of its start, want once", n)
	}
}
