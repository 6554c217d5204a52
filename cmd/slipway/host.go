package main

import "github.com/urfave/cli/v2"

// hostCommands returns the commands of this file's group (filled by its issue).
func hostCommands() []*cli.Command { return nil }
