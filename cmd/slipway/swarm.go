package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"slipway.dev/slipway/ops/swarm/assign"
)

// swarmCommand is `slipway swarm`: work assignment over a worker pool.
func swarmCommand() *cli.Command {
	return &cli.Command{
		Name:  "swarm",
		Usage: "assign jobs to a pool of workers: each job to exactly one, balanced, moving the fewest",
		Description: `A Swarm (kubectl get swarm) names a pool of workers (the pods of a StatefulSet or
Deployment) and a job list; the controller assigns every job to exactly one Ready
worker, loads within one, and on any change moves the fewest jobs and refreshes only
the workers whose share changed. See docs/swarm.md.`,
		Subcommands: []*cli.Command{
			swarmControllerCommand(),
			swarmWorkerCommand(),
			swarmAssignCommand(),
			swarmManifestCommand(),
		},
	}
}

func swarmAssignCommand() *cli.Command {
	return &cli.Command{
		Name:      "assign",
		Usage:     "compute an assignment: one JSON request on stdin, the assignment as JSON on stdout",
		UsageText: "slipway swarm assign [--pretty] < request.json",
		Description: `The request names the jobs and the workers, and optionally the assignment in
force ("previous", kept as far as balance allows) and the jobs that must run alone on
a worker ("dedicated"):
  {"jobs": ["cam-1", "cam-2", "cam-3"], "workers": ["w-0", "w-1"],
   "previous": {"w-0": ["cam-1", "cam-2", "cam-3"]}, "dedicated": []}
The answer lists every worker (an empty list when it has no job) and how many jobs
changed worker:
  {"assignments":{"w-0":["cam-2","cam-3"],"w-1":["cam-1"]},"moved":1}
The same request always gives the same answer, whatever the order of its lists.
A malformed or unassignable request exits with status 2 and says why on stderr.

Examples:
  echo '{"jobs":["a","b","c"],"workers":["w-0","w-1"]}' | slipway swarm assign
  slipway swarm assign --pretty < request.json | jq '.assignments["w-0"]'`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "pretty", Usage: "indent the JSON output"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "json", Usage: "json, or table (one line per worker: its job count and jobs, then the moves)"},
		},
		Action: func(c *cli.Context) error {
			in, err := assign.Decode(c.App.Reader)
			if err != nil {
				return exit(err, 2)
			}
			if o := c.String("output"); o != "json" && o != "table" {
				return exit(fmt.Errorf("--output %q is not json or table", o), 2)
			}
			res, err := assign.Assign(in)
			if err != nil {
				return exit(fmt.Errorf("cannot assign: %w", err), 2)
			}
			if c.String("output") == "table" {
				return assignTable(c.App.Writer, res)
			}
			enc := json.NewEncoder(c.App.Writer)
			if c.Bool("pretty") {
				enc.SetIndent("", "  ")
			}
			return enc.Encode(res)
		},
	}
}

// assignTable prints an assignment for people: a line per worker, in name
// order, then the jobs moved and any left unassigned.
func assignTable(w io.Writer, res assign.Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tJOBS\tLIST")
	for _, name := range slices.Sorted(maps.Keys(res.Assignments)) {
		jobs := res.Assignments[name]
		fmt.Fprintf(tw, "%s\t%d\t%s\n", name, len(jobs), strings.Join(jobs, ","))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "moved: %d\n", res.Moved)
	if err == nil && len(res.Unassigned) > 0 {
		_, err = fmt.Fprintf(w, "unassigned (no worker): %s\n", strings.Join(res.Unassigned, ","))
	}
	return err
}
