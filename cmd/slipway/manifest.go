package main

import (
	"github.com/urfave/cli/v2"

	opsv1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/manifest"
)

// manifestCommand prints the operator's deployment manifest.
func manifestCommand() *cli.Command {
	return &cli.Command{
		Name:      "manifest",
		Usage:     "print the manifest that deploys the operator: namespace, CRD, RBAC, agent DaemonSet, default UpdateChannel",
		UsageText: "slipway ops manifest [--namespace NS] [--image IMAGE] [--channel-url URL] [--channel-version V] | kubectl apply -f -",
		Description: `The default UpdateChannel stays paused until it has a version, so applying the
manifest never starts a rollout by itself:
  kubectl -n slipway-system patch upchan default --type=merge -p '{"spec":{"version":"latest","paused":false}}'`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "namespace", Value: manifest.DefaultNamespace, Usage: "namespace of the agent and the default channel", EnvVars: envs("NAMESPACE")},
			&cli.StringFlag{Name: "image", Value: manifest.DefaultImage(), Usage: "image of the agent and the upgrade Jobs", EnvVars: envs("IMAGE")},
			&cli.StringFlag{Name: "channel-url", Value: manifest.DefaultChannelURL, Usage: "release channel of the default UpdateChannel", EnvVars: envs("CHANNEL_URL")},
			&cli.StringFlag{Name: "channel-version", Usage: "version of the default UpdateChannel (latest follows the channel; empty leaves it paused)", EnvVars: envs("CHANNEL_VERSION")},
			&cli.BoolFlag{Name: "install-crds", Usage: "run the agents with --install-crds and let them write CRDs (off: the manifest carries the CRD)", EnvVars: envs("MANIFEST_INSTALL_CRDS")},
			&cli.IntFlag{Name: "concurrency", Usage: "nodes upgrading at once on the default UpdateChannel (0: the CRD default, 1)", EnvVars: envs("CONCURRENCY")},
			&cli.BoolFlag{Name: "systemd-hosts", Usage: "mount the host's D-Bus socket into the agents, so that systemd hosts reboot through logind, which honours inhibitor locks (off: SIGRTMIN+5 to PID 1, no host socket)", EnvVars: envs("MANIFEST_SYSTEMD_HOSTS")},
			&cli.StringSliceFlag{Name: "mirror-dir", Usage: "a host `DIR` file:// channels read from: mounted read-only into the agents and allowed to the upgrade Jobs (repeatable)", EnvVars: envs("MANIFEST_MIRROR_DIRS")},
			&cli.StringSliceFlag{Name: "release-source", Usage: "a channel `URL` the upgrade Jobs may download from (github-releases://owner/repo also admits its repository's download address; repeatable; default the channel's --channel-url); the admission policy refuses any other --source", EnvVars: envs("MANIFEST_RELEASE_SOURCES")},
			&cli.StringSliceFlag{Name: "token-secret", Usage: "a Secret `NAME` a channel's tokenSecretRef may name (repeatable; default " + manifest.DefaultTokenSecret + ")", EnvVars: envs("MANIFEST_TOKEN_SECRETS")},
			&cli.StringFlag{Name: "isolation", Value: manifest.IsolationPolicy, Usage: "how the agent is held to its node beyond RBAC: policy (ValidatingAdmissionPolicies, Kubernetes 1.30+) or webhook (slipway's admission webhook evaluating the same policies, for Kubernetes 1.22-1.29, e.g. k3os's k3s; docs/agent/old-kubernetes.md)", EnvVars: envs("MANIFEST_ISOLATION")},
			&cli.StringSliceFlag{Name: "job-image", Usage: "an `IMAGE` a channel's spec.image may name for its Jobs, besides --image (repeatable)", EnvVars: envs("MANIFEST_JOB_IMAGES")},
		},
		Action: func(c *cli.Context) error {
			return manifest.Run(c.Context, manifest.Options{
				Namespace:    c.String("namespace"),
				Image:        c.String("image"),
				InstallCRDs:  c.Bool("install-crds"),
				SystemdHosts: c.Bool("systemd-hosts"), MirrorDirs: c.StringSlice("mirror-dir"),
				TokenSecrets: c.StringSlice("token-secret"), JobImages: c.StringSlice("job-image"), ReleaseSources: c.StringSlice("release-source"),
				Channel: opsv1.UpdateChannelSpec{
					URL:         c.String("channel-url"),
					Version:     c.String("channel-version"),
					Concurrency: c.Int("concurrency"),
				},
				Isolation: c.String("isolation"),
				Out:       c.App.Writer,
			})
		},
	}
}
