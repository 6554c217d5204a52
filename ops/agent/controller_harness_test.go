package agent

import (
	"context"
	"log/slog"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"slipway.dev/slipway/ops/protocol"
)

// The fleet's controller: one in-process `slipway ops controller` for the
// fleet's namespace, started with the fleet, as the administrator or (after
// asServiceAccount) as the manifest's controller ServiceAccount.

// startController runs the controller until stopController or the test's end.
func (f *fleet) startController() { f.startReplica("") }

// startReplica runs the controller as replica id (its Lease identity)
// until stopController or the test's end.
func (f *fleet) startReplica(id string) {
	f.stopController()
	ctx, cancel := context.WithCancel(context.Background())
	ra := &runningAgent{cancel: cancel, done: make(chan struct{})}
	f.mu.Lock()
	f.ctrl = ra
	cfg := f.ctrlConfig
	f.mu.Unlock()
	if cfg == nil {
		cfg = env.Config
	}
	o := Options{LeaseDuration: 3 * time.Second, Resync: 5 * time.Second}
	if f.opts != nil {
		f.opts(&o)
	}
	co := ControllerOptions{Identity: "controller-" + f.ns + id, Namespace: f.ns, Config: cfg, Retry: o.Retry, Resync: o.Resync,
		LeaseDuration: o.LeaseDuration, HeartbeatInterval: o.HeartbeatInterval, GitHubToken: o.GitHubToken, GitHubBaseURL: o.GitHubBaseURL,
		Log: slog.New(slog.NewTextHandler(f.logFile(), &slog.HandlerOptions{Level: slog.LevelInfo}))}
	go func() {
		defer close(ra.done)
		if err := RunController(ctx, co); err != nil && ctx.Err() == nil {
			f.t.Errorf("controller: %v", err)
		}
	}()
}

// stopController stops the controller (its Lease released) and waits for it.
func (f *fleet) stopController() {
	f.mu.Lock()
	ra := f.ctrl
	f.ctrl = nil
	f.mu.Unlock()
	if ra != nil {
		ra.cancel()
		<-ra.done
	}
}

// controllerAs restarts the controller with cfg's credentials.
func (f *fleet) controllerAs(cfg *rest.Config) {
	f.mu.Lock()
	f.ctrlConfig = cfg
	f.mu.Unlock()
	f.startController()
}

// agentsUp waits until every node named has its agent's heartbeat and its
// versions published: the controller, running before the agents, would
// otherwise skip a node whose agent is still starting (NoAgent), and a test
// of the order in which nodes take slots would see that instead.
func (f *fleet) agentsUp(nodes ...string) {
	f.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for _, n := range nodes {
		for {
			l, lerr := f.kube.CoordinationV1().Leases(f.ns).Get(context.Background(), protocol.AgentLeaseName(n), metav1.GetOptions{})
			node, nerr := f.kube.CoreV1().Nodes().Get(context.Background(), n, metav1.GetOptions{})
			if lerr == nil && nerr == nil && l.Spec.RenewTime != nil && node.Annotations[protocol.AnnotationRootfsVersion] != "" {
				break
			}
			if time.Now().After(deadline) {
				f.t.Fatalf("the agent of %s did not report within a minute (heartbeat: %v, node: %v)", n, lerr, nerr)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
