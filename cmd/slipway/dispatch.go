package main

import (
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"
)

// dispatchArgs implements multi-call: when argv[0]'s base name is not the
// app's own name but names a command, the arguments are rewritten to run that
// command. A name matches a command by its name or an alias at any depth
// ("upgrade"), or by its path joined with dashes ("ops-upgrade",
// "slipway-ops-upgrade"). The shallowest match wins; unknown names run the
// app as usual.
func dispatchArgs(app *cli.App, args []string) []string {
	if len(args) == 0 {
		return args
	}
	if old, ok := oldOperatorArgs(args); ok { // dogswatch, bottlerocket-update-operator
		return old
	}
	base := strings.TrimSuffix(filepath.Base(args[0]), ".exe")
	if base == app.Name {
		return args
	}
	path := findCommandPath(app.Commands, strings.TrimPrefix(base, app.Name+"-"), nil)
	if path == nil {
		return args
	}
	out := append([]string{app.Name}, path...)
	return append(out, args[1:]...)
}

// findCommandPath searches breadth-first for the command named name and
// returns the names leading to it.
func findCommandPath(cmds []*cli.Command, name string, prefix []string) []string {
	for _, c := range cmds {
		p := append(append([]string{}, prefix...), c.Name)
		if c.HasName(name) || strings.Join(p, "-") == name {
			return p
		}
	}
	for _, c := range cmds {
		if p := findCommandPath(c.Subcommands, name, append(append([]string{}, prefix...), c.Name)); p != nil {
			return p
		}
	}
	return nil
}
