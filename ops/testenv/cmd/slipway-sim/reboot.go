package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"slipway.dev/slipway/ops/testenv/supervisor"
)

// reboot asks the supervisor to reboot a node, and with --wait waits until
// it is back.
func reboot(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("reboot", flag.ContinueOnError)
	node := fs.String("node", os.Getenv("NODE_NAME"), "node to reboot (default $NODE_NAME)")
	delay := fs.Duration("delay", 5*time.Second, "how long the node stays down")
	wait := fs.Bool("wait", false, "answer only when the node is back (Ready, new boot ID, its command started again); not for the node's own command, which the reboot stops")
	socket := fs.String("socket", os.Getenv("SLIPWAY_SIM_SOCKET"), "supervisor socket (default $SLIPWAY_SIM_SOCKET)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *node == "" || *socket == "" {
		return fmt.Errorf("reboot: --node (or $NODE_NAME) and --socket (or $SLIPWAY_SIM_SOCKET) are required")
	}
	req := supervisor.Request{Op: "reboot", Node: *node, Delay: delay.String(), Wait: *wait}
	if err := supervisor.Send(ctx, *socket, req); err != nil {
		return fmt.Errorf("reboot %s: %w", *node, err)
	}
	if *wait {
		fmt.Printf("slipway-sim: %s rebooted and back (down for %s)\n", *node, *delay)
		return nil
	}
	fmt.Printf("slipway-sim: reboot of %s accepted (down for %s)\n", *node, *delay)
	return nil
}
