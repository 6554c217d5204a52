package testenv

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/testenv/executor"
	"slipway.dev/slipway/ops/testenv/heartbeat"
	"slipway.dev/slipway/ops/testenv/supervisor"
)

// simGoroutines are the node simulation's: the executor, the supervisor's
// socket and the status heartbeat.
const simGoroutines = 3

// startNodeSim starts the node executor, the supervisor of the fake nodes
// and their status heartbeat.
func (e *Env) startNodeSim(ctx context.Context) error {
	// Each has its own user agent, so the audit log tells them apart (the
	// executor stands in for the kubelet, the supervisor for the node).
	execClient, err := clientAs(e.Config, "slipway-testenv/executor")
	if err != nil {
		return err
	}
	supClient, err := clientAs(e.Config, "slipway-testenv/supervisor")
	if err != nil {
		return err
	}
	e.NodesRoot = filepath.Join(e.Dir, "nodes")
	e.Socket = filepath.Join(e.Dir, "sim.sock")
	log := e.opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := e.writeNodeKubeconfigs(); err != nil {
		return err
	}
	env := []string{"KUBECONFIG=" + e.Kubeconfig}
	if e.opts.ExecPath != "" { // node commands find slipway and slipway-sim where pods do
		env = append(env, "PATH="+e.opts.ExecPath)
	}
	env = append(env, e.opts.NodeEnv...)
	x, err := executor.New(executor.Options{Client: execClient, NodesRoot: e.NodesRoot, Path: e.opts.ExecPath,
		Env: env, Log: log.With("component", "executor")})
	if err != nil {
		return err
	}
	e.Supervisor, err = supervisor.New(supervisor.Options{Client: supClient, Nodes: e.Nodes, NodesRoot: e.NodesRoot,
		Command: e.opts.NodeCommand, Env: env, Socket: e.Socket, Log: log.With("component", "supervisor")})
	if err != nil {
		return err
	}
	beatClient, err := clientAs(e.Config, "slipway-testenv/heartbeat")
	if err != nil {
		return err
	}
	simCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.stopSim = cancel
	e.simDone = make(chan struct{}, simGoroutines)
	go func() { _ = x.Run(simCtx); e.simDone <- struct{}{} }()
	go func() {
		if err := heartbeat.Run(simCtx, heartbeat.Options{Client: beatClient, Nodes: e.Nodes,
			Period: e.opts.NodeStatusReportPeriod, Log: log.With("component", "heartbeat")}); err != nil {
			log.Error("the fake nodes' status heartbeat stopped", "err", err)
		}
		e.simDone <- struct{}{}
	}()
	go func() {
		if err := e.Supervisor.Serve(simCtx, e.Socket); err != nil {
			log.Error("supervisor socket", "err", err)
		}
		e.simDone <- struct{}{}
	}()
	return e.Supervisor.Start()
}

func clientAs(cfg *rest.Config, userAgent string) (*kubernetes.Clientset, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = userAgent
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", userAgent, err)
	}
	return cs, nil
}

// stopNodeSim stops the executor (killing its pods' processes) and the node commands.
func (e *Env) stopNodeSim() {
	if e.stopSim == nil {
		return
	}
	e.stopSim()
	e.Supervisor.Stop()
	for range simGoroutines {
		select {
		case <-e.simDone:
		case <-time.After(15 * time.Second):
		}
	}
	_ = os.Remove(e.Socket)
}

// NodeDir is the directory standing for node's root file system (Cluster only).
func (e *Env) NodeDir(node string) string { return filepath.Join(e.NodesRoot, node) }

// Reboot simulates a reboot of a fake node (see supervisor.Supervisor.Reboot).
func (e *Env) Reboot(ctx context.Context, node string, delay time.Duration) error {
	if e.Supervisor == nil {
		return fmt.Errorf("reboot %s: the Env has no simulated cluster (Options.Cluster)", node)
	}
	return e.Supervisor.Reboot(ctx, node, delay)
}

// Replace ends node's command (its agent) as a DaemonSet update does
// (SIGTERM, SIGKILL after grace) and starts it again from the node's PATH
// (see supervisor.Supervisor.Replace); false when the node was rebooting
// or ran no command.
func (e *Env) Replace(node string, grace time.Duration) (bool, error) {
	if e.Supervisor == nil {
		return false, fmt.Errorf("replace %s: the Env has no simulated cluster (Options.Cluster)", node)
	}
	return e.Supervisor.Replace(node, grace)
}

// Crash kills node's command (its agent) with SIGKILL and starts it again
// on the same boot (see supervisor.Supervisor.Crash); false when the node
// was rebooting or ran no command.
func (e *Env) Crash(node string) (bool, error) {
	if e.Supervisor == nil {
		return false, fmt.Errorf("crash %s: the Env has no simulated cluster (Options.Cluster)", node)
	}
	return e.Supervisor.Crash(node)
}
