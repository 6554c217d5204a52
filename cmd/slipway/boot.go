package main

import "github.com/urfave/cli/v2"

// bootCommands returns the commands of this file's group (filled by its issue).
func bootCommands() []*cli.Command { return nil }
