package controller

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"slipway.dev/slipway/ops/agent"
	"slipway.dev/slipway/ops/crds"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/testenv"
)

var env *testenv.Env

// TestMain starts the package's control plane. Four of its parallel tests
// run at once: each is a fleet of its own (namespace, nodes, controller),
// and they mostly wait on Leases, heartbeats, bakes and refused writes,
// the CPU idle for much of a run at two.
func TestMain(m *testing.M) {
	testenv.Overlap(4)
	os.Exit(testenv.RunMain(m, testenv.Options{CRDs: crds.Must()}, &env))
}

// fleet is the harness of ops/internal/fleettest running this package's
// controller beside the nodes' agents (ops/agent) as its peers. opts edits
// the controller's Options, and the agents' settings are taken from them.
type fleet struct {
	*fleettest.Fleet
	opts func(*Options)
	// nodeOnly are the nodes whose agents speak the previous release's
	// protocol (agent.Options.NodeOnly) when they start next.
	nodeOnly sync.Map
	// protocol are the NodeUpdate protocols (agent.Options.Protocol) the
	// agents of nodes speak when they start next (none: the current).
	protocol sync.Map
}

func newFleet(t *testing.T, nodes int, edit func(*Options)) *fleet {
	t.Helper()
	f := &fleet{opts: edit}
	f.Fleet = fleettest.New(t, env, nodes, fleettest.Programs{Agent: f.agent, Controller: f.controller})
	return f
}

// options are the Options of the controller run as r, edited by opts.
func (f *fleet) options(r fleettest.ControllerRun) Options {
	o := Options{Identity: r.Identity, Namespace: r.Namespace, Config: r.Config, Log: r.Log, LeaseDuration: 3 * time.Second, Resync: 5 * time.Second}
	if f.opts != nil {
		f.opts(&o)
	}
	return o
}

func (f *fleet) controller(r fleettest.ControllerRun) func(context.Context) error {
	o := f.options(r)
	return func(ctx context.Context) error { return Run(ctx, o) }
}

// agent runs a node's agent with the settings the controller's options share with it.
func (f *fleet) agent(r fleettest.AgentRun) func(context.Context) error {
	o := f.options(fleettest.ControllerRun{})
	ao := agent.Options{NodeName: r.Node, Namespace: r.Namespace, SystemDir: r.SystemDir, Config: r.Config, Image: "slipway:test",
		BootIDFile: r.BootIDFile, Rebooter: r.Rebooter, Log: r.Log, Retry: o.Retry, Resync: o.Resync, LeaseDuration: o.LeaseDuration,
		HeartbeatInterval: o.HeartbeatInterval, GitHubToken: o.GitHubToken, GitHubBaseURL: o.GitHubBaseURL,
		WorkWatchLinger: time.Second} // the agents' Job and pod watches close in every idle moment
	if old, _ := f.nodeOnly.Load(r.Node); old == true {
		ao.NodeOnly = true
	}
	if p, ok := f.protocol.Load(r.Node); ok {
		ao.Protocol, _ = p.(int)
	}
	return func(ctx context.Context) error { return agent.Run(ctx, ao) }
}
