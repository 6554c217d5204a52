// Command slipway-sim runs the simulated cluster of ops/testenv in the
// foreground for scripts/cluster, and asks its supervisor to reboot a node.
//
//	slipway-sim up --dir STATE [--nodes N] [--tools DIR] [--exec-path PATH] [--node-command CMD] [--node-identity NS/SA]
//	slipway-sim kubeconfig --as NS/SA [--node NAME] [--kubeconfig FILE]
//	slipway-sim reboot --node NAME [--delay 5s] [--wait] [--socket PATH]
//	slipway-sim status [--kubeconfig FILE]
//	slipway-sim take DURATION COMMAND [ARG...]
//	slipway-sim chaos --bin DIR [--system k3os|all] [--seeds N] [--seed S] [--duration D] [--nodes N] [--schedule FILE]
//	slipway-sim monitor [--kubeconfig FILE] [--out FILE] [--max-in-flight N] [--operator-state-timeout D] [--apps DIR [--app-report NAME]] [--audit-log FILE] [--hosts DIR]
//
// `up` writes STATE/kubeconfig, STATE/pids ("name pid" lines: its own and every
// process it started) and finally STATE/ready, then runs until SIGTERM or
// SIGINT, when it stops everything it started (the state stays for `down`).
// `reboot` reaches the supervisor through $SLIPWAY_SIM_SOCKET (set for every
// node command) or --socket, and returns once the reboot is accepted (with
// --wait: once the node is back).
// `kubeconfig` prints a kubeconfig that acts as a ServiceAccount (on a node,
// with --node), for a component run by hand as its manifest's identity.
// `chaos` runs slipway's systems under faults drawn from seeds with the
// invariant monitor watching (ops/testenv/chaos); `monitor` watches an API
// server and writes every invariant violation as a JSON line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
)

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "slipway-sim:", err)
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: slipway-sim up|status|reboot|take|kubeconfig|chaos|monitor [flags]: %w", flag.ErrHelp)
	}
	switch args[0] {
	case "up":
		return up(ctx, args[1:])
	case "status":
		return status(ctx, args[1:])
	case "reboot":
		return reboot(ctx, args[1:])
	case "take":
		return take(ctx, args[1:])
	case "kubeconfig":
		return kubeconfig(os.Stdout, args[1:])
	case "chaos":
		return chaosCmd(ctx, args[1:])
	case "monitor":
		return monitorCmd(ctx, args[1:])
	default:
		return fmt.Errorf("unknown command %q (want up, status, reboot, take, kubeconfig, chaos or monitor): %w", args[0], flag.ErrHelp)
	}
}
