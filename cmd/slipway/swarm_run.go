package main

import (
	"log/slog"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"slipway.dev/slipway/ops/swarm/controller"
	swarmmanifest "slipway.dev/slipway/ops/swarm/manifest"
	"slipway.dev/slipway/ops/swarm/member"
	"slipway.dev/slipway/ops/swarm/worker"
)

var swarmDefaults = controller.Defaults()

func swarmControllerCommand() *cli.Command {
	return &cli.Command{
		Name:      "controller",
		Usage:     "run the swarm controller: assign the Swarms' jobs to their workers (one replica leads)",
		UsageText: "slipway swarm controller --namespace NS [--http :9480] [--kubeconfig FILE]",
		Description: `Watches the Swarms of one namespace, their worker pods and ConfigMaps; writes each
Swarm's workers' ConfigMap (key config.yml) and status when the assignment changes, and
restarts (refresh: restart) only the workers whose jobs changed, maxUnavailable at a time.

Examples:
  slipway swarm controller --namespace streams --kubeconfig ~/.kube/config
  curl -s localhost:9480/assignments | jq '.cameras.assignments'`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "namespace", Usage: "namespace of the Swarms, their workers and the Lease", EnvVars: envs("NAMESPACE"), Required: true},
			&cli.StringFlag{Name: "identity", Usage: "this replica's name in the Lease (default: host name)", EnvVars: envs("IDENTITY")},
			&cli.StringFlag{Name: "http", Value: swarmDefaults.HTTPAddr, Usage: "serve /assignments, /metrics, /healthz and /readyz here (\"\" = off)", EnvVars: envs("SWARM_HTTP")},
			kubeconfigFlag(),
			&cli.DurationFlag{Name: "lease-duration", Value: swarmDefaults.LeaseDuration, Usage: "how long a dead leader keeps the Lease", EnvVars: envs("LEASE_DURATION")},
			&cli.DurationFlag{Name: "settle-timeout", Value: swarmDefaults.SettleTimeout, Usage: "longest wait for a workload to reach its desired Ready pods before reassigning anyway", EnvVars: envs("SETTLE_TIMEOUT")},
			&cli.DurationFlag{Name: "restart-timeout", Value: swarmDefaults.RestartTimeout, Usage: "how long a restarted worker keeps its share while its pod is away", EnvVars: envs("RESTART_TIMEOUT")},
			&cli.DurationFlag{Name: "resync", Value: swarmDefaults.Resync, Usage: "re-read every Swarm at least this often", EnvVars: envs("RESYNC")},
		},
		Action: func(c *cli.Context) error {
			cfg, err := kubeConfig(c.String("kubeconfig"))
			if err != nil {
				return err
			}
			return controller.Run(c.Context, controller.Options{
				Config: cfg, Namespace: c.String("namespace"), Identity: c.String("identity"), HTTPAddr: c.String("http"),
				LeaseDuration: c.Duration("lease-duration"), SettleTimeout: c.Duration("settle-timeout"),
				RestartTimeout: c.Duration("restart-timeout"), Resync: c.Duration("resync"), Log: slog.Default(),
			})
		},
	}
}

func swarmWorkerCommand() *cli.Command {
	return &cli.Command{
		Name:      "worker",
		Usage:     "run beside a worker: hand it its jobs from the mounted config and report the version applied",
		UsageText: "slipway swarm worker --config /etc/swarm/config.yml (--out FILE [--ack FILE] | --exec CMD) [--once]",
		Description: `Reads this pod's share (POD_NAME) of the workers' ConfigMap mounted at --config, waits
until it exists, then writes the jobs to --out (one per line after a "# swarm-version: N"
and a "# swarm-valid-until: TIME" header, replaced atomically, the deadline refreshed on
every Lease renewal: an application stops every job once it passed) or runs --exec CMD
with the jobs as its last arguments (and in SWARM_JOBS, SWARM_VERSION, SWARM_VALID_UNTIL,
SWARM_JOBS_FILE with --out), in a process group of its own, restarting it when the share
changes. SWARM_VERSION (and swarm-version) is a fencing token: it grows each time a job
changes hands, so a store that keeps the highest seen per job can refuse a stale writer. It annotates its pod with the version applied
(swarm.slipway.dev/applied-version), which the controller waits for. It serves
/healthz (its loop turns) and /readyz (config read, version reported, Lease held) on
--http, for the pod's liveness and readiness probes.

With --ack FILE the application takes part in the handover: it stops the jobs a new
jobs file drops, writes that file's swarm-version to FILE, then starts the jobs it adds
(and writes 0 once it stopped everything on its way out). The worker reports a version,
and releases its Lease when it stops, only once FILE acknowledges it, so a job taken
from this pod starts elsewhere only after the application itself stopped it.

Examples (in the worker pod; POD_NAME and POD_NAMESPACE from the downward API):
  slipway swarm worker --config /etc/swarm/config.yml --out /shared/jobs.txt
  slipway swarm worker --config /etc/swarm/config.yml --exec "/app/process-streams --verbose"
  slipway swarm worker --config /etc/swarm/config.yml --out /shared/jobs.txt --ack /shared/jobs.ack
  slipway swarm worker --config /etc/swarm/config.yml --out /shared/jobs.txt --once   # refresh: restart`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Value: "/etc/swarm/config.yml", Usage: "the mounted config.yml of the workers' ConfigMap", EnvVars: envs("SWARM_CONFIG")},
			&cli.StringFlag{Name: "pod-name", Usage: "this pod's name", EnvVars: []string{"POD_NAME"}},
			&cli.StringFlag{Name: "namespace", Usage: "this pod's namespace", EnvVars: []string{"POD_NAMESPACE"}},
			&cli.StringFlag{Name: "pod-uid", Usage: "this pod's UID (fieldRef metadata.uid): the worker's identity in its Lease, one per pod incarnation", EnvVars: []string{"POD_UID"}},
			&cli.StringFlag{Name: "out", Usage: "write the jobs to this file, one per line", EnvVars: envs("SWARM_OUT")},
			&cli.StringFlag{Name: "exec", Usage: "run this command with the jobs as arguments (split on spaces)", EnvVars: envs("SWARM_EXEC")},
			&cli.StringFlag{Name: "ack", Usage: "with --out: the application's acknowledgement file (it writes the swarm-version of the jobs file it runs within, 0 when stopped); shares are confirmed, and the Lease released on the way out, only once it did", EnvVars: envs("SWARM_ACK")},
			&cli.DurationFlag{Name: "ack-timeout", Value: worker.DefaultAckTimeout, Usage: "on the way out, the longest wait for the application's acknowledgement that it stopped; past it the Lease is left to lapse, not released", EnvVars: envs("SWARM_ACK_TIMEOUT")},
			&cli.BoolFlag{Name: "once", Usage: "apply the first share only (the Swarm's refresh is restart)", EnvVars: envs("SWARM_ONCE")},
			&cli.BoolFlag{Name: "no-report", Usage: "do not annotate the pod nor hold a Lease (outside a cluster)"},
			&cli.StringFlag{Name: "http", Value: worker.DefaultHTTPAddr, Usage: "serve /healthz (the worker's loop turns) and /readyz (its config read, its version reported, its Lease held) here (\"\" = off)", EnvVars: envs("SWARM_WORKER_HTTP")},
			&cli.DurationFlag{Name: "lease-duration", Value: member.DefaultDuration, Usage: "the worker's Lease: jobs stop after 2/3 of it without a renewal, and move after all of it", EnvVars: envs("SWARM_LEASE_DURATION")},
			kubeconfigFlag(),
		},
		Action: func(c *cli.Context) error {
			opts := worker.Options{
				ConfigFile: c.String("config"), PodName: c.String("pod-name"), PodUID: c.String("pod-uid"), Namespace: c.String("namespace"),
				Out: c.String("out"), Ack: c.String("ack"), AckTimeout: c.Duration("ack-timeout"), Exec: strings.Fields(c.String("exec")), Once: c.Bool("once"), LeaseDuration: c.Duration("lease-duration"),
				HTTPAddr: c.String("http"),
				Log:      slog.New(slog.NewTextHandler(os.Stderr, nil)),
			}
			if err := opts.Check(); err != nil {
				return exit(err, 2)
			}
			if !c.Bool("no-report") {
				cfg, err := kubeConfig(c.String("kubeconfig"))
				if err != nil {
					return err
				}
				opts.Config = cfg
			}
			return worker.Run(c.Context, opts)
		},
	}
}

func swarmManifestCommand() *cli.Command {
	return &cli.Command{
		Name:      "manifest",
		Usage:     "print the manifest that deploys the swarm controller: namespace, CRD, least-privilege RBAC, Deployment",
		UsageText: "slipway swarm manifest [--namespace NS] [--image IMAGE] | kubectl apply -f -",
		Description: `The controller acts in one namespace only (a Role, no ClusterRole). Bind your worker
pods' ServiceAccount to the slipway-swarm-worker Role (or use that ServiceAccount) so
that the worker sidecar can report its version.

Example:
  slipway swarm manifest --namespace streams | kubectl apply -f -`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "namespace", Value: "slipway-system", Usage: "namespace of the controller, its Swarms and their workers", EnvVars: envs("NAMESPACE")},
			&cli.StringFlag{Name: "image", Usage: "image of the controller (default: this build's)", EnvVars: envs("IMAGE")},
			&cli.IntFlag{Name: "replicas", Value: 2, Usage: "controller replicas (one leads)"},
		},
		Action: func(c *cli.Context) error {
			return swarmmanifest.Write(c.App.Writer, swarmmanifest.Options{
				Namespace: c.String("namespace"), Image: c.String("image"), Replicas: int32(c.Int("replicas")),
			})
		},
	}
}
