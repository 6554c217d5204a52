package main

import "github.com/urfave/cli/v2"

// clusterCommands returns the commands of this file's group (filled by its issue).
func clusterCommands() []*cli.Command { return nil }
