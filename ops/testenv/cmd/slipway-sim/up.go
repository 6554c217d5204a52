package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"slipway.dev/slipway/ops/crds"
	"slipway.dev/slipway/ops/testenv"
)

// up starts the simulated cluster and runs until a signal.
func up(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	dir := fs.String("dir", "", "state directory (required)")
	nodes := fs.Int("nodes", 3, "number of fake nodes")
	tools := fs.String("tools", os.Getenv(testenv.EnvToolsDir), "directory of the control-plane binaries (default $SLIPWAY_TOOLS_DIR)")
	execPath := fs.String("exec-path", os.Getenv("PATH"), "PATH-style list where executed pods' commands are looked up")
	nodeCmd := fs.String("node-command", "", "shell command started once per fake node (run by sh -c)")
	nodeSA := fs.String("node-identity", "", "NAMESPACE/SERVICEACCOUNT: each node command gets $SLIPWAY_NODE_DIR/kubeconfig-node acting as it, bound to its node (a DaemonSet pod's token)")
	timeout := fs.Duration("timeout", 5*time.Minute, "how long the start may take")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return fmt.Errorf("up: --dir is required")
	}
	var nodeID *testenv.Identity
	if *nodeSA != "" {
		var err error
		if nodeID, err = testenv.ParseServiceAccount(*nodeSA); err != nil {
			return fmt.Errorf("up: --node-identity: %w", err)
		}
	}
	objs, err := crds.Objects()
	if err != nil {
		return fmt.Errorf("load slipway's CRDs: %w", err)
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(*dir, "sim.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var command []string
	if strings.TrimSpace(*nodeCmd) != "" {
		command = []string{"sh", "-c", *nodeCmd}
	}
	env, err := testenv.Start(ctx, testenv.Options{
		Cluster: true, Nodes: *nodes, CRDs: objs, ToolsDir: *tools, Dir: *dir, Timeout: *timeout,
		ExecPath: *execPath, NodeCommand: command, NodeIdentity: nodeID, Progress: os.Stdout,
		Logger: slog.New(slog.NewTextHandler(logf, nil)),
	})
	if err != nil {
		return err
	}
	defer env.Stop()
	if err := writePids(filepath.Join(*dir, "pids"), env); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*dir, "ready"), []byte(env.Kubeconfig+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Printf("slipway-sim: up; kubeconfig %s, supervisor socket %s\n", env.Kubeconfig, env.Socket)
	<-ctx.Done()
	fmt.Println("slipway-sim: stopping")
	return nil
}

// writePids records this process and every process the Env started.
func writePids(path string, env *testenv.Env) error {
	lines := []string{fmt.Sprintf("slipway-sim %d", os.Getpid())}
	var names []string
	pids := env.Pids()
	for n := range pids {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		lines = append(lines, fmt.Sprintf("%s %d", n, pids[n]))
	}
	return os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}
