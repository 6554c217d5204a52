package main

import "github.com/urfave/cli/v2"

// configCommand groups the cloud-config commands (filled by its issue).
func configCommand() *cli.Command {
	return &cli.Command{Name: "config", Usage: "read the node's cloud-config and write what it enables", Hidden: true}
}
