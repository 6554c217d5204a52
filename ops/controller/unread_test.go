package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// timeoutGets wraps cfg's transport: while fail is above zero, a GET of
// the object at a path ending in suffix is answered as a loaded API
// server's handler timeout answers it (504, reason Timeout), and fail
// counts down.
func timeoutGets(cfg *rest.Config, suffix string, fail *atomic.Int32) *rest.Config {
	return timeouts(cfg, getOf(suffix), false, fail)
}

// getOf matches a GET of the object at a path ending in suffix.
func getOf(suffix string) func(*http.Request, []byte) bool {
	return func(r *http.Request, _ []byte) bool {
		return r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, suffix)
	}
}

// timeouts wraps cfg's transport: while fail is above zero, a request
// that match picks (given its body) is answered as a loaded API server's
// handler timeout answers it (504, reason Timeout), and fail counts down.
// landed: the request is sent first, and its answer lost (a write that
// was applied, its caller told it timed out).
func timeouts(cfg *rest.Config, match func(r *http.Request, body []byte) bool, landed bool, fail *atomic.Int32) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			var body []byte
			if req.Body != nil && req.Body != http.NoBody {
				var err error
				if body, err = io.ReadAll(req.Body); err != nil {
					return nil, err
				}
				req.Body.Close()
				req.Body = io.NopCloser(bytes.NewReader(body))
			}
			if !match(req, body) || fail.Add(-1) < 0 {
				return rt.RoundTrip(req)
			}
			if landed {
				resp, err := rt.RoundTrip(req)
				if err != nil {
					return nil, err
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			return fleettest.TimeoutAnswer(req), nil
		})
	})
	return cfg
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestDrainWithoutAnAnswerWaits: the API server times out the
// controller's read of the channel that confirms a slot before its drain
// (as a loaded control plane does, 504): nothing was written, so the
// drain waits and asks again, the slot kept. No UpgradeFailed, no failure
// recorded, and all three roll.
func TestDrainWithoutAnAnswerWaits(t *testing.T) {
	t.Parallel()
	var fail atomic.Int32
	f, first, releaseFirst := grantedOneTimingOut(t, getOf("/updatechannels/default"), false, &fail)
	fail.Store(1) // the drain's confirmation of the slot is the next GET of the channel
	releaseFirst(true)
	f.rollsUnfailed(t, first, "read of the channel", &fail)
}

// grantedOneTimingOut is grantedOne (no servers), the controller's
// requests that match picks answered with a timeout while fail is above
// zero (timeouts; landed: sent first). It returns the fleet, the node
// granted the slot, and the release of its Job.
func grantedOneTimingOut(t *testing.T, match func(*http.Request, []byte) bool, landed bool, fail *atomic.Int32) (*fleet, string, func(bool)) {
	t.Helper()
	f, first, _, release := grantedOneWith(t, false, func(o *Options) {
		if o.Config != nil { // nil: the options the agents take their settings from
			o.Config = timeouts(o.Config, match, landed, fail)
		}
	})
	return f, first, release
}

// rollsUnfailed waits for f's three nodes at v2, none left cordoned, and
// fails t unless a request (what) was answered with a timeout (fail no
// longer 1) and no UpgradeFailed Event nor failure was recorded: a
// request without an answer is nobody's failure.
func (f *fleet) rollsUnfailed(t *testing.T, node, what string, fail *atomic.Int32) {
	t.Helper()
	f.WaitFor("all three at v2", 3*time.Minute, fleettest.Done(3))
	f.AssertAllAt("v2")
	if fail.Load() > 0 { // 1 until the first answered with a timeout
		t.Fatalf("no %s was answered with a timeout: the test tests nothing", what)
	}
	if n := f.EventsWithin("UpgradeFailed", 1, time.Second); n > 0 {
		t.Errorf("%d UpgradeFailed Events: a request without an answer failed %s's upgrade", n, node)
	}
	if ch := f.Get(); len(ch.Status.Failed) > 0 {
		t.Errorf("failures recorded: %+v", ch.Status.Failed)
	}
}

// TestEvictionWithoutAnAnswerWaits: the drain is under way (cordoned) when
// the API server times out an eviction (504): the drain waits, the slot
// kept and the node cordoned, and asks again; the pod is evicted then, no
// UpgradeFailed, no failure recorded, and all three roll.
func TestEvictionWithoutAnAnswerWaits(t *testing.T) {
	t.Parallel()
	var fail atomic.Int32
	f, first, releaseFirst := grantedOneTimingOut(t, func(r *http.Request, _ []byte) bool {
		return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/pods/busy/eviction")
	}, false, &fail)
	t.Cleanup(func() {
		if t.Failed() {
			f.DumpLogs(first)
		}
	})
	pod := f.runningPod(t, first, "busy", nil)
	fail.Store(1)
	releaseFirst(true)
	f.podGoesWhenEvicted(t, pod)
	f.rollsUnfailed(t, first, "eviction", &fail)
}

// TestPodListWithoutAnAnswerWaits: the drain's list of the node's pods
// (a list across every namespace, the heaviest request of a drain) is
// timed out by the API server (504) after the cordon: the drain waits,
// the node cordoned and the slot kept, and resumes; no UpgradeFailed, no
// failure recorded, and all three roll.
func TestPodListWithoutAnAnswerWaits(t *testing.T) {
	t.Parallel()
	var fail atomic.Int32
	f, first, releaseFirst := grantedOneTimingOut(t, func(r *http.Request, _ []byte) bool {
		return r.Method == http.MethodGet && r.URL.Path == "/api/v1/pods" && strings.Contains(r.URL.Query().Get("fieldSelector"), "spec.nodeName=")
	}, false, &fail)
	fail.Store(1)
	releaseFirst(true)
	f.rollsUnfailed(t, first, "list of a node's pods", &fail)
}

// TestCordonWithoutAnAnswerResumes: the API server applies the cordon of
// the first node's drain but times out its answer (504). The drain waits
// and reads the Node again: it finds its own cordon and resumes it (the
// start it recorded kept), rather than lifting it and failing the
// upgrade. No UpgradeFailed, no failure recorded, all three roll, none
// left cordoned.
func TestCordonWithoutAnAnswerResumes(t *testing.T) {
	t.Parallel()
	var fail atomic.Int32
	f, first, releaseFirst := grantedOneTimingOut(t, func(r *http.Request, body []byte) bool {
		return r.Method == http.MethodPatch && strings.Contains(r.URL.Path, "/nodes/") && bytes.Contains(body, []byte(`"unschedulable":true`))
	}, true, &fail)
	fail.Store(1) // the next cordon is the first node's
	releaseFirst(true)
	f.rollsUnfailed(t, first, "cordon", &fail)
	if !f.logged("drain resumed", first) {
		t.Errorf("the drain of %s did not resume the cordon it found", first)
	}
}

// logged tells whether the controller logged msg for node.
func (f *fleet) logged(msg, node string) bool {
	b, err := os.ReadFile(filepath.Join(f.Root, "agents.log"))
	if err != nil {
		f.T.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, `msg="`+msg+`"`) && strings.Contains(line, " node="+node+" ") {
			return true
		}
	}
	return false
}

// TestUnreadOr: a request without an answer waits; an answer, and a slot
// found gone (even inside a transport's error, as the drain client's
// confirmation refuses an eviction), does not.
func TestUnreadOr(t *testing.T) {
	timeout := apierrors.NewTimeoutError("request did not complete within the allotted timeout", 0)
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"no error", nil, false},
		{"a timeout (504)", fmt.Errorf("cordon n: %w", timeout), true},
		{"an eviction's connection dropped", &url.Error{Op: "Post", URL: "https://api/eviction", Err: io.ErrUnexpectedEOF}, true},
		{"the slot's confirmation timed out, inside the eviction's transport error",
			&url.Error{Op: "Post", URL: "https://api/eviction", Err: fmt.Errorf("evict p: %w", timeout)}, true},
		{"the slot gone, inside the eviction's transport error",
			fmt.Errorf("drain n: %w", &url.Error{Op: "Post", URL: "https://api/eviction", Err: fmt.Errorf("evict p: %w", errSlotGone)}), false},
		{"the slot gone", errSlotGone, false},
		{"a drain blocked by a budget", fmt.Errorf("%w: node n still runs 1 pods", drain.ErrBlocked), false},
		{"cordoned by another owner", fmt.Errorf("cordon n: %w", drain.ErrCordonedByOther), false},
		{"forbidden", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "p", errors.New("RBAC")), false},
	} {
		var unread *errUnread
		if got := errors.As(unreadOr(c.err), &unread); got != c.want {
			t.Errorf("%s: unreadOr(%v) waits = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// TestUncachedNodeWithoutAnAnswerCountsAsServer: a node the controller's
// Node cache lacks is read from the API server; a read without an answer
// (504) counts it as a server, so that its reboot asks the server gate
// rather than going ahead as a worker's; a Node not found is none.
func TestUncachedNodeWithoutAnAnswerCountsAsServer(t *testing.T) {
	t.Parallel()
	const node = "noanswer-uncached"
	var fail atomic.Int32
	fail.Store(1)
	c, err := kube.NewForConfig(timeoutGets(env.Config, "/nodes/"+node, &fail))
	if err != nil {
		t.Fatal(err)
	}
	ctl := &Controller{kube: c, nodes: cache.NewStore(cache.MetaNamespaceKeyFunc)}
	if !ctl.isServerNode(context.Background(), node) {
		t.Error("a node whose read got no answer counted as a worker: its reboot would skip the server gate")
	}
	if fail.Load() > 0 { // 1 until the first answered with a timeout
		t.Fatal("the node's read was not answered with a timeout: the test tests nothing")
	}
	if ctl.isServerNode(context.Background(), node) {
		t.Error("a Node not found counted as a server")
	}
}

// TestReleaseWithoutAnAnswerKeepsTheFence: the status write that takes a
// slot away (here released: its node's agent fell silent before its
// reboot) lands, but its answer is lost (504), and the writes of that
// node's view fail. The slot taken away is fenced all the same: no slot
// is granted while the node's view may still show it (revoke.go); once
// the view can be written, the capacity is granted.
func TestReleaseWithoutAnAnswerKeepsTheFence(t *testing.T) {
	t.Parallel()
	refuse := &refusedViews{}
	var fail atomic.Int32
	releasesN0 := func(r *http.Request, body []byte) bool { // the status write without n0's slot
		if r.Method != http.MethodPut || !strings.HasSuffix(r.URL.Path, "/updatechannels/default/status") {
			return false
		}
		var ch v1.UpdateChannel
		return json.Unmarshal(body, &ch) == nil && !slices.ContainsFunc(ch.Status.Updating, func(s v1.Slot) bool { return strings.HasSuffix(s.Node, "-n0") })
	}
	f := newFleet(t, 2, func(o *Options) {
		o.HeartbeatInterval = 3 * time.Second
		if o.Config != nil { // nil: the options the agents take their settings from
			o.Config = timeouts(o.Config, releasesN0, true, &fail)
			o.Config.Wrap(refuse.wrap)
		}
	})
	a, b := agentFallsSilent(t, f)
	refuse.paths = []string{"/nodes/" + a, "/namespaces/" + f.NS + "/nodeupdates/" + protocol.NodeUpdateName(a)}
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(),
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS, "pick": "yes"}}})
	f.waitSlotShown(t, a) // a slot never shown needs no fence
	refuse.on.Store(true)
	fail.Store(1)
	if err := f.PatchNodeLabel(b, "pick", "yes"); err != nil {
		t.Fatal(err)
	}
	f.WaitFor("the slot of "+a+" released", 2*time.Minute, func(ch *v1.UpdateChannel) bool { return plan.FindSlot(ch.Status, a) < 0 })
	f.Holds("no slot granted while "+a+"'s view may show the slot taken away", 10*time.Second, func(ch *v1.UpdateChannel) bool {
		return plan.FindSlot(ch.Status, b) < 0 && ch.Status.Counts.UpToDate == 0
	})
	if fail.Load() > 0 { // 1 until the first answered with a timeout
		t.Fatal("the release's status write was not answered with a timeout: the test tests nothing")
	}
	if !viewShowsSlot(t, f, a) {
		t.Fatalf("the view of %s no longer shows its slot although every write of it failed", a)
	}
	refuse.on.Store(false)
	f.WaitFor(b+" granted a slot once "+a+"'s view can be written", 2*time.Minute, func(ch *v1.UpdateChannel) bool {
		return plan.FindSlot(ch.Status, b) >= 0 || ch.Status.Counts.UpToDate >= 1
	})
}
