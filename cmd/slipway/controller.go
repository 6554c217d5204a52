package main

import (
	"log/slog"
	"os"

	"github.com/urfave/cli/v2"

	"slipway.dev/slipway/ops/controller"
	"slipway.dev/slipway/ops/plan"
)

// controllerCommand is `slipway ops controller`: the UpdateChannel fleet
// view (slots, staging permits, polls, release resolution, channel status),
// elected among its replicas (the slipway-controller Deployment).
func controllerCommand() *cli.Command {
	return &cli.Command{
		Name:  "controller",
		Usage: "run the UpdateChannel controller (the slipway-controller Deployment): grants slots and staging permits, resolves releases, writes channel status",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "identity", Usage: "this replica's name in the election Lease", EnvVars: []string{"POD_NAME", "SLIPWAY_IDENTITY"}},
			&cli.StringFlag{Name: "namespace", Value: "slipway-system", Usage: "namespace of the UpdateChannels, Leases and Events", EnvVars: envs("NAMESPACE")},
			&cli.BoolFlag{Name: "install-crds", Usage: "create or update the UpdateChannel CRD at start", EnvVars: envs("INSTALL_CRDS")},
			&cli.StringFlag{Name: "metrics-addr", Value: ":9479", Usage: "serve Prometheus metrics at http://<addr>/metrics (\"\" = off)", EnvVars: envs("METRICS_ADDR")},
			&cli.StringFlag{Name: "pprof-addr", Usage: "serve Go profiles at http://<addr>/debug/pprof/, e.g. 127.0.0.1:6060 (off by default; a CPU profile: /debug/pprof/profile?seconds=30)", EnvVars: envs("PPROF_ADDR")},
			kubeconfigFlag(),
			&cli.DurationFlag{Name: "resync", Value: controllerDefaults.Resync, Usage: "re-read the fleet view at least this often", EnvVars: envs("RESYNC")},
			&cli.DurationFlag{Name: "lease-duration", Value: controllerDefaults.LeaseDuration, Usage: "duration of the controller's Lease; a dead holder is replaced after it", EnvVars: envs("LEASE_DURATION")},
		}, retryFlags()...),
		Action: func(c *cli.Context) error {
			cfg, err := kubeConfig(c.String("kubeconfig"))
			if err != nil {
				return err
			}
			o := controller.Options{Identity: c.String("identity"), Namespace: c.String("namespace"), Config: cfg,
				InstallCRDs: c.Bool("install-crds"), MetricsAddr: c.String("metrics-addr"), ProfileAddr: c.String("pprof-addr"), Resync: c.Duration("resync"),
				LeaseDuration: c.Duration("lease-duration"), GitHubToken: os.Getenv("GITHUB_TOKEN"),
				Log: slog.New(slog.NewTextHandler(os.Stderr, nil))}
			o.Retry.Base, o.Retry.Max = c.Duration("retry-backoff"), c.Duration("retry-backoff-max")
			return controller.Run(c.Context, o)
		},
	}
}

// retryFlags are the retry backoff of failed nodes, which the agent (its
// rollback Jobs) and the controller (slots) both take.
func retryFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "retry-backoff", Value: plan.DefaultRetry.Base, Usage: "wait after a node's first failure, doubled after each next one (at most --retry-backoff-max)", EnvVars: envs("RETRY_BACKOFF")},
		&cli.DurationFlag{Name: "retry-backoff-max", Value: plan.DefaultRetry.Max, Usage: "longest wait between retries of a failed node", EnvVars: envs("RETRY_BACKOFF_MAX")},
	}
}

// controllerDefaults documents the controller's defaults in its flags.
var controllerDefaults = controller.Defaults()
