package main

import (
	"github.com/urfave/cli/v2"

	"slipway.dev/slipway/config"
)

// configCommand groups the cloud-config commands.
func configCommand() *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "read the node's cloud-config and write what it enables",
		Description: `The cloud-config is merged from <system-dir>/config.yaml, then the node's
config.yaml, then config.d/*.yaml in lexical order (mappings merge key by key,
anything else is replaced). Its "slipway:" section enables the operator and
labels the node; every other key belongs to k3os. See docs/cloud-config.md.`,
		Subcommands: []*cli.Command{configApplyCommand(), configShowCommand()},
	}
}

func configSourceFlags() []cli.Flag {
	return []cli.Flag{
		systemDirFlag(),
		&cli.StringFlag{Name: "config", Value: config.DefaultLocalConfig, Usage: "the node's cloud-config file", EnvVars: envs("CONFIG")},
		&cli.StringFlag{Name: "config-dir", Value: config.DefaultConfigDir, Usage: "directory of *.yaml cloud-config drop-ins, merged last", EnvVars: envs("CONFIG_DIR")},
	}
}

func configSources(c *cli.Context) config.Sources {
	return config.Sources{SystemDir: c.String("system-dir"), LocalConfig: c.String("config"), ConfigDir: c.String("config-dir")}
}

func configApplyCommand() *cli.Command {
	return &cli.Command{
		Name:  "apply",
		Usage: "write the operator manifest and node labels the cloud-config enables (idempotent)",
		Description: `With slipway.operator.enabled, writes slipway.yaml (namespace, CRD, RBAC, agent
DaemonSet, default UpdateChannel) into the k3s auto-deploy directory; without it,
removes that file. slipway.labels go to a k3s config drop-in. Unchanged files are not
rewritten; changed ones are replaced atomically. An invalid config names the bad key
and changes nothing.`,
		Flags: append(configSourceFlags(),
			&cli.StringFlag{Name: "manifests-dir", Value: config.DefaultManifestsDir, Usage: "the k3s auto-deploy manifests directory", EnvVars: envs("MANIFESTS_DIR")},
			&cli.StringFlag{Name: "k3s-config-dir", Value: config.DefaultK3sConfigDir, Usage: "the k3s config.yaml.d directory (node labels)", EnvVars: envs("K3S_CONFIG_DIR")},
			&cli.StringFlag{Name: "image", Usage: "the agent image when the config names none (default: this build's)", EnvVars: envs("IMAGE")},
		),
		Action: func(c *cli.Context) error {
			_, err := config.Apply(c.Context, config.Options{
				Sources:      configSources(c),
				ManifestsDir: c.String("manifests-dir"),
				K3sConfigDir: c.String("k3s-config-dir"),
				Image:        c.String("image"),
				Out:          c.App.Writer,
			})
			return err
		},
	}
}

func configShowCommand() *cli.Command {
	return &cli.Command{
		Name:  "show",
		Usage: "print the merged cloud-config (after checking its slipway section)",
		Flags: append(configSourceFlags(),
			&cli.BoolFlag{Name: "json", Usage: "print JSON instead of YAML", EnvVars: envs("JSON")},
		),
		Action: func(c *cli.Context) error {
			return config.Show(config.ShowOptions{Sources: configSources(c), JSON: c.Bool("json"), Out: c.App.Writer})
		},
	}
}
