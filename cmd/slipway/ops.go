package main

import "github.com/urfave/cli/v2"

// opsCommand groups the node-side commands (host.go), the boot chain
// (boot.go) and the cluster side (agent.go).
func opsCommand() *cli.Command {
	var subs []*cli.Command
	subs = append(subs, hostCommands()...)
	subs = append(subs, bootCommands()...)
	subs = append(subs, clusterCommands()...)
	return &cli.Command{
		Name:        "ops",
		Usage:       "upgrade this node's OS, or run the operator that upgrades the cluster",
		Subcommands: subs,
	}
}
