package main

import (
	"log/slog"
	"os"

	"github.com/urfave/cli/v2"

	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/webhook"
)

// webhookCommand is `slipway ops webhook`: the admission webhook of the
// webhook isolation (the slipway-admission Deployment), which holds the
// agent and the controller to the manifest's policies on Kubernetes
// 1.22-1.29. Its flags are the manifest's options the policies are
// rendered from.
func webhookCommand() *cli.Command {
	return &cli.Command{
		Name:  "webhook",
		Usage: "serve the admission webhook that holds the agent and the controller to the manifest's policies on Kubernetes 1.22-1.29 (the slipway-admission Deployment of `ops manifest --isolation=webhook`)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "namespace", Value: manifest.DefaultNamespace, Usage: "namespace of the agent, the controller and their channels", EnvVars: envs("NAMESPACE")},
			&cli.StringFlag{Name: "config-name", Usage: "the ValidatingWebhookConfiguration whose CA bundle it writes (required)"},
			&cli.StringFlag{Name: "service-host", Usage: "the DNS name of its Service, which its certificate names (required)"},
			&cli.IntFlag{Name: "port", Value: manifest.AdmissionPort, Usage: "HTTPS port"},
			&cli.StringFlag{Name: "kubeconfig", Usage: "kubeconfig file (default: in-cluster config)", EnvVars: []string{"KUBECONFIG", "SLIPWAY_KUBECONFIG"}},
			&cli.StringFlag{Name: "image", Value: manifest.DefaultImage(), Usage: "as the manifest's --image"},
			&cli.StringFlag{Name: "github-download-base", Value: manifest.DefaultGitHubDownloadBase, Usage: "where GitHub serves release assets"},
			&cli.StringFlag{Name: "host-system-dir", Value: manifest.SystemDir, Usage: "the host system directory the Jobs mount"},
			&cli.StringFlag{Name: "host-lock-dir", Value: manifest.RunDir, Usage: "the host lock directory the Jobs mount"},
			&cli.StringSliceFlag{Name: "job-image", Usage: "as the manifest's --job-image"},
			&cli.StringSliceFlag{Name: "job-command", Usage: "the upgrade Job container's command, one element a flag"},
			&cli.StringSliceFlag{Name: "mirror-dir", Usage: "as the manifest's --mirror-dir"},
			&cli.StringSliceFlag{Name: "token-secret", Usage: "as the manifest's --token-secret"},
			&cli.StringSliceFlag{Name: "release-source", Usage: "as the manifest's --release-source"},
		},
		Action: func(c *cli.Context) error {
			cfg, err := kubeConfig(c.String("kubeconfig"))
			if err != nil {
				return err
			}
			return webhook.Run(c.Context, webhook.Options{
				Manifest: manifest.Options{Namespace: c.String("namespace"), Image: c.String("image"), GitHubDownloadBase: c.String("github-download-base"),
					HostSystemDir: c.String("host-system-dir"), HostLockDir: c.String("host-lock-dir"), JobImages: c.StringSlice("job-image"),
					JobCommand: c.StringSlice("job-command"), MirrorDirs: c.StringSlice("mirror-dir"), TokenSecrets: c.StringSlice("token-secret"),
					ReleaseSources: c.StringSlice("release-source")},
				ConfigName: c.String("config-name"), ServiceHost: c.String("service-host"), Port: c.Int("port"), Config: cfg,
				Log: slog.New(slog.NewTextHandler(os.Stderr, nil)),
			})
		},
	}
}
