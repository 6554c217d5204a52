package updateoperator

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/updateoperator/platform"
)

// A controller whose decide loop is wedged (its node writes never return)
// fails /healthz naming the loop, while the replica that does not lead stays
// healthy and ready past the same allowance (it waits, it is not stuck).
func TestWedgedControllerFailsHealthz(t *testing.T) {
	f := newFleet(t, "probes", 1)
	node := f.nodes[0]
	var wedged atomic.Bool
	release := make(chan struct{})
	const leaseName, allowance = "probes-update-operator", 3 * time.Second
	leaderAddr, otherAddr := freeLoopback(t), freeLoopback(t)
	stopLeader := f.controller(func(o *ControllerOptions) {
		o.LeaseName, o.Identity, o.LeaseDuration = leaseName, "probes-leader", 3*time.Second
		o.HealthAddr, o.HealthAllowance, o.Resync = leaderAddr, allowance, 200*time.Millisecond
		cfg := rest.CopyConfig(o.Config)
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(req *http.Request) (*http.Response, error) {
				if wedged.Load() && req.Method == http.MethodPatch && strings.HasPrefix(req.URL.Path, "/api/v1/nodes/") {
					<-release // a call that never returns, deadline or not (until the test ends)
					return nil, context.Canceled
				}
				return rt.RoundTrip(req)
			})
		})
		o.Config = cfg
	})
	defer stopLeader()
	defer close(release) // before the leader stops: its wedged turn returns, so the stop can end
	eventually(t, time.Minute, "the first replica leads", func() (bool, string) {
		l, err := f.kube.CoordinationV1().Leases("default").Get(context.Background(), leaseName, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, "no holder yet"
		}
		return *l.Spec.HolderIdentity == "probes-leader", "held by " + *l.Spec.HolderIdentity
	})
	// The node's update over first: a wedge during it could hang a write of
	// the drain's goroutine instead of the decide loop's turn.
	eventually(t, 2*time.Minute, "the node updated", f.done)
	eventually(t, time.Minute, leaderAddr+" ok", func() (bool, string) { return probeSays(leaderAddr, "/healthz") })
	eventually(t, time.Minute, leaderAddr+" ready", func() (bool, string) { return probeSays(leaderAddr, "/readyz") })

	wedged.Store(true)
	// A change the leader must write: its turn hangs in the patch.
	f.patch(node, map[string]any{"metadata": map[string]any{"annotations": map[string]any{f.keys.Wanted(): nil}}})
	eventually(t, time.Minute, "the wedged leader's /healthz fails", func() (bool, string) {
		ok, body := probeSays(leaderAddr, "/healthz")
		return !ok && strings.Contains(body, "decide"), body
	})
	// The second replica starts only now: started earlier, under load it
	// could take the 3 s Lease before the leader's first write got through
	// its tenure fence, and a replica that no longer leads is rightly
	// healthy (its turns end at once), which would leave nothing wedged.
	stopOther := f.controller(func(o *ControllerOptions) {
		o.LeaseName, o.Identity, o.LeaseDuration = leaseName, "probes-other", 3*time.Second
		o.HealthAddr, o.HealthAllowance, o.Resync = otherAddr, allowance, 200*time.Millisecond
	})
	defer stopOther()
	for _, path := range []string{"/healthz", "/readyz"} {
		eventually(t, time.Minute, otherAddr+path+" ok", func() (bool, string) { return probeSays(otherAddr, path) })
	}
	time.Sleep(allowance) // past the allowance, the replica that waits for the Lease
	for _, path := range []string{"/healthz", "/readyz"} {
		if ok, body := probeSays(otherAddr, path); !ok {
			t.Errorf("the replica that does not lead: %s %s", path, body)
		}
	}
}

// An agent whose host call never returns (it ignores its deadline) fails
// /healthz naming its loop; ready once its Node informer synced.
func TestWedgedAgentFailsHealthz(t *testing.T) {
	f := newFleet(t, "agentprobe", 0)
	name := "agentprobe-0"
	if _, err := f.kube.CoreV1().Nodes().Create(context.Background(), testenv.FakeNode(name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	release := make(chan struct{})
	p := &hangingCheck{release: release, entered: make(chan struct{}, 1)}
	addr := freeLoopback(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = RunAgent(ctx, AgentOptions{Config: f.env.Config, Prefix: f.prefix, NodeName: name, Platform: p, Resync: 200 * time.Millisecond,
			HealthAddr: addr, HealthAllowance: 2 * time.Second, Log: f.log})
	}()
	defer func() { close(release); cancel(); <-done }()
	eventually(t, time.Minute, "the agent's /readyz ok", func() (bool, string) { return probeSays(addr, "/readyz") })
	// The controller's stabilize makes the agent check, and the check hangs.
	f.patch(name, map[string]any{"metadata": map[string]any{"annotations": map[string]any{f.keys.Wanted(): string(IntentStabilize)}}})
	<-p.entered
	eventually(t, time.Minute, "the wedged agent's /healthz fails", func() (bool, string) {
		ok, body := probeSays(addr, "/healthz")
		return !ok && strings.Contains(body, "reconcile"), body
	})
}

// hangingCheck is a host whose check for updates never returns.
type hangingCheck struct {
	platform.Platform
	release chan struct{}
	entered chan struct{}
}

func (h *hangingCheck) Check(context.Context) (platform.Status, error) {
	select {
	case h.entered <- struct{}{}:
	default:
	}
	<-h.release
	return platform.Status{Current: "v1"}, nil
}

// probeSays GETs path at addr: whether it answered 200, and its body.
func probeSays(addr, path string) (bool, string) {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK, strings.TrimSpace(string(body))
}

func freeLoopback(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
