// Command slipway is the multi-call binary: the host-side OS upgrader and the
// cluster controllers that coordinate it. main only assembles the urfave/cli
// app; each command file turns flags into a domain package's Options and calls
// its Run.
//
// Multi-call: when the program is started under another name (a symlink such
// as kubectl-eds, or slipway-upgrade), the command of that name runs.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	app := newApp()
	if err := app.RunContext(ctx, dispatchArgs(app, os.Args)); err != nil {
		fmt.Fprintf(os.Stderr, "slipway: %v\n", err)
		os.Exit(exitCode(err))
	}
}

// newApp assembles the command tree. Each group lives in its own file.
func newApp() *cli.App {
	return &cli.App{
		Name:                 "slipway",
		Usage:                "keep an immutable-OS Kubernetes fleet up to date",
		Description:          "slipway swaps a node's OS (rootfs, kernel, k3s) atomically and rolls new versions\nthrough a cluster a few nodes at a time; it also runs the node-annotation update\noperator, ExtendedDaemonSet and swarm controllers. Run a command with --help for details.",
		Version:              versionString(),
		EnableBashCompletion: true,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "debug", Usage: "log at debug level", EnvVars: []string{"SLIPWAY_DEBUG"}},
		},
		Before: setupLogging,
		Commands: []*cli.Command{
			opsCommand(),
			configCommand(),
			updateOperatorCommand(),
			edsCommand(),
			swarmCommand(),
			versionCommand(),
			uncordonAllCommand(),
		},
	}
}

// setupLogging installs a structured logger on stderr; --debug lowers its level.
func setupLogging(c *cli.Context) error {
	level := slog.LevelInfo
	if c.Bool("debug") {
		level = slog.LevelDebug
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
	return nil
}

// exitCode maps an error to the process exit status: cli.ExitCoder keeps its
// own, anything else is 1.
func exitCode(err error) int {
	if ec, ok := err.(cli.ExitCoder); ok && ec.ExitCode() != 0 {
		return ec.ExitCode()
	}
	return 1
}
