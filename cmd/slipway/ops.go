package main

import "github.com/urfave/cli/v2"

// opsCommand groups the node-side commands (host.go), the boot chain
// (boot.go), the cluster side (agent.go) and the manifests that deploy it
// (manifest.go).
func opsCommand() *cli.Command {
	var subs []*cli.Command
	subs = append(subs, hostCommands()...)
	subs = append(subs, bootCommands()...)
	subs = append(subs, clusterCommands()...)
	subs = append(subs, manifestCommand(), webhookCommand())
	return &cli.Command{
		Name:        "ops",
		Usage:       "upgrade this node's OS, or run the operator that upgrades the cluster",
		Subcommands: subs,
	}
}
