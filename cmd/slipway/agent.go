package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"slipway.dev/slipway/ops/agent"
	"slipway.dev/slipway/ops/agentmem"
	"slipway.dev/slipway/upgrade/reboot"
)

// clusterCommands returns the cluster-side commands of `slipway ops`: agent and controller.
func clusterCommands() []*cli.Command {
	return []*cli.Command{agentCommand(), controllerCommand()}
}

func agentCommand() *cli.Command {
	return &cli.Command{
		Name:  "agent",
		Usage: "run the UpdateChannel agent on this node (the slipway DaemonSet)",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "node-name", Usage: "this node's name", EnvVars: []string{"NODE_NAME", "SLIPWAY_NODE_NAME"}},
			&cli.StringFlag{Name: "namespace", Value: "slipway-system", Usage: "namespace of the UpdateChannels, Jobs, Leases and Events", EnvVars: envs("NAMESPACE")},
			&cli.StringFlag{Name: "system-dir", Value: "/k3os/system", Usage: "where this process reads the node's system directory", EnvVars: envs("SYSTEM_DIR")},
			&cli.StringFlag{Name: "host-system-dir", Value: "/k3os/system", Usage: "the system directory's path on the host (the upgrade Job's hostPath)", EnvVars: envs("HOST_SYSTEM_DIR")},
			&cli.StringFlag{Name: "host-lock-dir", Value: "/run/k3os", Usage: "the host directory of the upgrade lock (the upgrade Job's hostPath)", EnvVars: envs("HOST_LOCK_DIR")},
			&cli.StringFlag{Name: "image", Usage: "image of the upgrade Job when the channel names none (the agent's own)", EnvVars: envs("IMAGE")},
			&cli.StringFlag{Name: "upgrade-command", Value: "slipway", Usage: "the upgrade Job's `COMMAND`, run with the arguments ops upgrade ...", EnvVars: envs("UPGRADE_COMMAND")},
			&cli.BoolFlag{Name: "install-crds", Usage: "create or update the UpdateChannel CRD at start", EnvVars: envs("INSTALL_CRDS")},
			&cli.StringFlag{Name: "reboot-method", Value: "auto", Usage: "how to reboot: auto (the host's init, told from its PID 1 and, when mounted, --host-run-dir: SIGRTMIN+5 to systemd, or logind when the system bus is reachable, SIGTERM to busybox init as on k3os, SIGINT to openrc-init, runlevel 6 to sysvinit, else reboot(2) after sync), systemd (SIGRTMIN+5 to PID 1), logind (over the system bus; honours inhibitor locks), openrc (busybox init or openrc-init, whichever PID 1 is), busybox, openrc-init, sysvinit, syscall or command", EnvVars: envs("REBOOT_METHOD")},
			&cli.StringFlag{Name: "host-run-dir", Value: "/host/run", Usage: "where the host's /run is seen, to tell sysvinit or openrc-init started as /sbin/init by their control FIFOs (the manifest mounts none: such hosts set --reboot-method)", EnvVars: envs("HOST_RUN_DIR")},
			&cli.StringFlag{Name: "host-proc", Value: "/proc", Usage: "the /proc of the host's PID namespace (the agent's pod has hostPID), where the host's init is PID 1", EnvVars: envs("HOST_PROC")},
			&cli.DurationFlag{Name: "reboot-stall-timeout", Value: agentDefaults.RebootStall, Usage: "a reboot still not happened after this long (same boot ID) is reported (Event RebootStalled) and requested again", EnvVars: envs("REBOOT_STALL_TIMEOUT")},
			&cli.DurationFlag{Name: "reboot-escalate-after", Value: 2 * agentDefaults.RebootStall, Usage: "a reboot the host's init was asked for and did not carry out after this long (PID 1 stuck in its shutdown) is forced: sync, then reboot(2) (Event RebootForced); 0 = never; never with --reboot-method syscall or command, or --boot-id-from-node", EnvVars: envs("REBOOT_ESCALATE_AFTER")},
			&cli.StringFlag{Name: "reboot-command", Usage: "the reboot command for --reboot-method=command (split on spaces)", EnvVars: envs("REBOOT_COMMAND")},
			&cli.StringFlag{Name: "boot-id-file", Value: "/proc/sys/kernel/random/boot_id", Usage: "a file whose content changes with every boot", EnvVars: envs("BOOT_ID_FILE")},
			&cli.StringFlag{Name: "boot-record-dir", Value: "/run/k3os", Usage: "a directory every boot clears (the host's /run/k3os) where the agent records what each boot runs, for a Node registered again on the same boot; \"\" = off (always off with --boot-id-from-node)", EnvVars: envs("BOOT_RECORD_DIR")},
			&cli.StringFlag{Name: "cmdline-file", Value: "/proc/cmdline", Usage: "the kernel command line, where slipway's loader names the rootfs it booted (slipway.rootfs=)", EnvVars: envs("CMDLINE_FILE")},
			&cli.BoolFlag{Name: "boot-id-from-node", Usage: "read the boot ID from the Node's status (simulated nodes) instead of --boot-id-file", EnvVars: envs("BOOT_ID_FROM_NODE")},
			&cli.StringFlag{Name: "metrics-addr", Value: ":9479", Usage: "serve Prometheus metrics at http://<addr>/metrics (\"\" = off)", EnvVars: envs("METRICS_ADDR")},
			kubeconfigFlag(),
			&cli.DurationFlag{Name: "resync", Value: agentDefaults.Resync, Usage: "resync the informers at least this often", EnvVars: envs("RESYNC")},
			&cli.DurationFlag{Name: "work-watch-linger", Value: agentDefaults.WorkWatchLinger, Usage: "watch the node's Node, Jobs and their pods only from its first work until it has had none for this long (at rest the agent watches its NodeUpdate only)", EnvVars: envs("WORK_WATCH_LINGER")},
			&cli.DurationFlag{Name: "lease-duration", Value: agentDefaults.LeaseDuration, Usage: "unused: the controller holds the election Lease (slipway ops controller); kept so that older DaemonSets start", EnvVars: envs("LEASE_DURATION")},
		}, retryFlags()...),
		Action: func(c *cli.Context) error {
			// One P: its upgrades and staging run in Jobs, nothing of its own in parallel.
			agentmem.Start(c.Context, agentmem.Options{MaxProcs: 1})
			cfg, err := kubeConfig(c.String("kubeconfig"))
			if err != nil {
				return err
			}
			rebooter, err := agentRebooterAt(c.String("reboot-method"), c.String("reboot-command"), c.String("host-proc"), c.String("host-run-dir"))
			if err != nil {
				return err
			}
			opts := agent.Options{
				NodeName: c.String("node-name"), Namespace: c.String("namespace"),
				SystemDir: c.String("system-dir"), HostSystemDir: c.String("host-system-dir"), HostLockDir: c.String("host-lock-dir"),
				Image: c.String("image"), UpgradeCommand: strings.Fields(c.String("upgrade-command")),
				InstallCRDs: c.Bool("install-crds"), Rebooter: rebooter, BootIDFile: c.String("boot-id-file"), BootIDFromNode: c.Bool("boot-id-from-node"), CmdlineFile: c.String("cmdline-file"),
				MetricsAddr: c.String("metrics-addr"), Config: cfg, Resync: c.Duration("resync"), WorkWatchLinger: c.Duration("work-watch-linger"),
				LeaseDuration: c.Duration("lease-duration"), GitHubToken: os.Getenv("GITHUB_TOKEN"), RebootStall: c.Duration("reboot-stall-timeout"),
				Log: slog.New(slog.NewTextHandler(os.Stderr, nil)),
			}
			opts.Retry.Base, opts.Retry.Max = c.Duration("retry-backoff"), c.Duration("retry-backoff-max")
			if !c.Bool("boot-id-from-node") { // simulated nodes share their host's /run
				opts.BootRecordDir = c.String("boot-record-dir")
			}
			if m := c.String("reboot-method"); c.Duration("reboot-escalate-after") > 0 && m != "syscall" && m != "command" && !c.Bool("boot-id-from-node") {
				opts.RebootEscalation, opts.RebootEscalateAfter = reboot.Syscall{}, c.Duration("reboot-escalate-after")
			}
			return agent.Run(c.Context, opts)
		},
	}
}

// agentDefaults documents the agent's defaults in its flags.
var agentDefaults = agent.Defaults()

func kubeConfig(path string) (*rest.Config, error) {
	if path == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("not running in a cluster (%w): pass --kubeconfig", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("read kubeconfig %s: %w", path, err)
	}
	return cfg, nil
}

// agentRebooterAt turns --reboot-method into a Rebooter; hostProc and
// hostRun are where this process sees the host's PID namespace's /proc and
// the host's /run.
func agentRebooterAt(method, command, hostProc, hostRun string) (reboot.Rebooter, error) {
	initctl := filepath.Join(hostRun, "initctl")
	switch method {
	case "auto":
		return reboot.AutoAt(hostProc, hostRun), nil
	case "systemd":
		return reboot.ForInit(reboot.InitSystemd, initctl), nil
	case "logind":
		return reboot.Logind{}, nil
	case "openrc": // OpenRC as service manager under busybox init (k3os), or openrc-init
		if reboot.Detect(reboot.ReadPID1(hostProc, hostRun)) == reboot.InitOpenRCInit {
			return reboot.ForInit(reboot.InitOpenRCInit, initctl), nil
		}
		return reboot.ForInit(reboot.InitBusybox, initctl), nil
	case "busybox":
		return reboot.ForInit(reboot.InitBusybox, initctl), nil
	case "openrc-init":
		return reboot.ForInit(reboot.InitOpenRCInit, initctl), nil
	case "sysvinit":
		return reboot.ForInit(reboot.InitSysV, initctl), nil
	case "syscall":
		return reboot.Syscall{}, nil
	case "command":
		if strings.TrimSpace(command) == "" {
			return nil, fmt.Errorf("--reboot-method=command needs --reboot-command")
		}
		return reboot.Command{Argv: strings.Fields(command)}, nil
	}
	return nil, fmt.Errorf("--reboot-method %q is not auto, systemd, logind, openrc, busybox, openrc-init, sysvinit, syscall or command", method)
}
