package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"time"
)

// take runs a command and returns when it ended and at least the given time
// passed since it started; it fails when the command failed. A fixed
// simulated duration around real work (the benchmark's upgrade Jobs).
//
//	slipway-sim take 3s slipway ops upgrade ...
func take(ctx context.Context, args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: slipway-sim take DURATION COMMAND [ARG...]: %w", flag.ErrHelp)
	}
	d, err := time.ParseDuration(args[0])
	if err != nil {
		return fmt.Errorf("take: %w: %w", err, flag.ErrHelp)
	}
	start := time.Now()
	cmd := exec.CommandContext(ctx, args[1], args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err = cmd.Run()
	time.Sleep(time.Until(start.Add(d)))
	if err != nil {
		return fmt.Errorf("take: %s: %w", args[1], err)
	}
	return nil
}
