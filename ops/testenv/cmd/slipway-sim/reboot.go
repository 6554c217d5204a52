package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"slipway.dev/slipway/ops/testenv/supervisor"
)

// reboot asks the supervisor to reboot a node.
func reboot(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("reboot", flag.ContinueOnError)
	node := fs.String("node", os.Getenv("NODE_NAME"), "node to reboot (default $NODE_NAME)")
	delay := fs.Duration("delay", 5*time.Second, "how long the node stays down")
	socket := fs.String("socket", os.Getenv("SLIPWAY_SIM_SOCKET"), "supervisor socket (default $SLIPWAY_SIM_SOCKET)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *node == "" || *socket == "" {
		return fmt.Errorf("reboot: --node (or $NODE_NAME) and --socket (or $SLIPWAY_SIM_SOCKET) are required")
	}
	if err := supervisor.Send(ctx, *socket, supervisor.Request{Op: "reboot", Node: *node, Delay: delay.String()}); err != nil {
		return fmt.Errorf("reboot %s: %w", *node, err)
	}
	fmt.Printf("slipway-sim: reboot of %s accepted (down for %s)\n", *node, *delay)
	return nil
}
