package agent

import (
	"context"
	"os"
	"testing"
	"time"

	"slipway.dev/slipway/ops/controller"
	"slipway.dev/slipway/ops/crds"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.RunMain(m, testenv.Options{CRDs: crds.Must()}, &env))
}

// fleet is the harness of ops/internal/fleettest running this package's
// agents, one per node, beside the controller (ops/controller) as its
// peer. opts edits every agent's Options, and the controller's settings
// are taken from them; a test may change it between starts.
type fleet struct {
	*fleettest.Fleet
	opts func(*Options)
}

func newFleet(t *testing.T, nodes int, edit func(*Options)) *fleet {
	t.Helper()
	f := &fleet{opts: edit}
	f.Fleet = fleettest.New(t, env, nodes, fleettest.Programs{Agent: f.agent, Controller: f.controller})
	return f
}

// options are the Options of the agent run as r, edited by opts.
func (f *fleet) options(r fleettest.AgentRun) Options {
	o := Options{NodeName: r.Node, Namespace: r.Namespace, SystemDir: r.SystemDir, Config: r.Config, Image: "slipway:test",
		BootIDFile: r.BootIDFile, Rebooter: r.Rebooter, LeaseDuration: 3 * time.Second, Resync: 5 * time.Second, Log: r.Log,
		// Every test's idle moments close the Job and pod watches and its
		// work opens them again (workwatch.go).
		WorkWatchLinger: time.Second}
	if f.opts != nil {
		f.opts(&o)
	}
	return o
}

func (f *fleet) agent(r fleettest.AgentRun) func(context.Context) error {
	o := f.options(r)
	return func(ctx context.Context) error { return Run(ctx, o) }
}

// controller runs the controller with the settings the agents' options share with it.
func (f *fleet) controller(r fleettest.ControllerRun) func(context.Context) error {
	o := f.options(fleettest.AgentRun{})
	co := controller.Options{Identity: r.Identity, Namespace: r.Namespace, Config: r.Config, Log: r.Log, Retry: o.Retry, Resync: o.Resync,
		LeaseDuration: o.LeaseDuration, HeartbeatInterval: o.HeartbeatInterval, GitHubToken: o.GitHubToken, GitHubBaseURL: o.GitHubBaseURL}
	return func(ctx context.Context) error { return controller.Run(ctx, co) }
}
