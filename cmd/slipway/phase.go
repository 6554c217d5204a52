package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"slipway.dev/slipway/upgrade"
	"slipway.dev/slipway/upgrade/lock"
)

// The halves of `ops upgrade` (--phase) and `ops prune`, which removes
// staged releases no longer wanted.

const (
	phaseAll      = "all"
	phaseStage    = "stage"
	phaseActivate = "activate"
)

// phaseRunner maps --phase to the upgrade function that runs it.
func phaseRunner(phase string) (func(context.Context, upgrade.Options) (*upgrade.Result, error), error) {
	switch phase {
	case phaseAll, "":
		return upgrade.Run, nil
	case phaseStage:
		return upgrade.Stage, nil
	case phaseActivate:
		return upgrade.Activate, nil
	}
	return nil, fmt.Errorf("--phase %q: want %s, %s or %s", phase, phaseAll, phaseStage, phaseActivate)
}

func pruneCommand() *cli.Command {
	return &cli.Command{
		Name:      "prune",
		Usage:     "remove staged releases that are neither current, previous nor kept",
		UsageText: "slipway ops prune [--keep VERSION]... [--system-dir DIR] [--remount] [--dry-run] [--json]",
		Description: `Removes, under the upgrade lock, every version folder slipway installed (it holds a
.slipway-release marker) that neither current nor previous names and whose release is not
named by --keep: releases staged with 'ops upgrade --phase stage' that are no longer wanted.
Folders k3os installed (no marker) are never removed. What boots does not change.

Examples:
  slipway ops prune --keep v1.2.4
  slipway ops prune --dry-run --json`,
		Flags: []cli.Flag{
			systemDirFlag(),
			&cli.StringSliceFlag{Name: "keep", Usage: "a release whose folders stay (repeatable)", EnvVars: envs("KEEP")},
			&cli.BoolFlag{Name: "remount", Usage: "remount the system directory's mount read-write for the removal, read-only after", EnvVars: envs("REMOUNT")},
			&cli.StringFlag{Name: "lock-file", Value: lock.DefaultPath, Usage: "the upgrade lock", EnvVars: envs("LOCK_FILE")},
			&cli.BoolFlag{Name: "dry-run", Usage: "print what would be removed, remove nothing", EnvVars: envs("DRY_RUN")},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON on stdout", EnvVars: envs("JSON")},
		},
		Action: pruneAction,
	}
}

func pruneAction(c *cli.Context) error {
	res, err := upgrade.Prune(c.Context, upgrade.PruneOptions{
		SystemDir: c.String("system-dir"), Keep: c.StringSlice("keep"), Remount: c.Bool("remount"),
		LockFile: c.String("lock-file"), Command: strings.Join(os.Args, " "), DryRun: c.Bool("dry-run"),
	})
	if err != nil {
		return exit(err, upgrade.ExitCode(err))
	}
	if c.Bool("json") {
		return json.NewEncoder(c.App.Writer).Encode(res)
	}
	for _, f := range res.Removed {
		fmt.Fprintln(c.App.Writer, "removed", f)
	}
	return nil
}
