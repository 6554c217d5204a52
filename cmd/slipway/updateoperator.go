package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"slipway.dev/slipway/ops/agentmem"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/kube"
	uo "slipway.dev/slipway/ops/updateoperator"
	"slipway.dev/slipway/ops/updateoperator/platform"
	"slipway.dev/slipway/ops/window"
	"slipway.dev/slipway/upgrade/channel"
)

// updateOperatorCommand is `slipway update-operator`: the node-annotation
// update operator (controller, agent, manifest, status).
func updateOperatorCommand() *cli.Command {
	return &cli.Command{
		Name:  "update-operator",
		Usage: "the node-annotation update operator (the Bottlerocket update operator's protocol): controller, agent, manifest, status",
		Description: `A controller Deployment and an agent DaemonSet talk only through annotations on Node
objects (<prefix>/action-wanted, action-active, action-state, update-available).
Started as dogswatch or bottlerocket-update-operator, the binary takes the old
-controller / -agent flags and the prefix bottlerocket.aws.

  slipway update-operator manifest --platform bottlerocket-api | kubectl apply -f -
  slipway update-operator status
  slipway update-operator status --json | jq '.nodes[] | select(.state=="error")'`,
		Subcommands: []*cli.Command{uoControllerCommand(), uoAgentCommand(), uoManifestCommand(), uoStatusCommand(), uoResumeCommand()},
	}
}

func uoEnvs(name string) []string { return []string{"SLIPWAY_UO_" + name} }

func prefixFlag() cli.Flag {
	return &cli.StringFlag{Name: "prefix", Value: uo.DefaultPrefix, EnvVars: uoEnvs("PREFIX"),
		Usage: "key prefix of the protocol's annotations and labels (bottlerocket.aws or thar.amazonaws.com for nodes of the old operator)"}
}

func kubeconfigFlag() cli.Flag {
	return &cli.StringFlag{Name: "kubeconfig", Usage: "kubeconfig file (default: in-cluster config)", EnvVars: []string{"KUBECONFIG", "SLIPWAY_KUBECONFIG"}}
}

func uoControllerCommand() *cli.Command {
	return &cli.Command{
		Name:  "controller",
		Usage: "decide which node does what (run as a Deployment; one replica leads through a Lease)",
		UsageText: `slipway update-operator controller --max-concurrent 2 --pause-between 5m \
    --window-days sat,sun --window-start 01:00 --window-end 05:00 --window-tz Europe/Paris
slipway update-operator controller --max-concurrent 10 --prepare-ahead --pause-between 0s`,
		Flags: append([]cli.Flag{
			prefixFlag(), kubeconfigFlag(),
			&cli.StringFlag{Name: "node-name", Usage: "the node the controller runs on (updated last)", EnvVars: []string{"NODE_NAME"}},
			&cli.StringFlag{Name: "namespace", Value: uo.DefaultNamespace, Usage: "namespace of the Lease", EnvVars: uoEnvs("NAMESPACE")},
			&cli.StringFlag{Name: "lease", Value: uo.LeaseName, Usage: "Lease electing one leader among replicas (\"\" = no election)", EnvVars: uoEnvs("LEASE")},
			&cli.DurationFlag{Name: "lease-duration", Value: 15 * time.Second, Usage: "how long a leader that stopped renewing (killed) keeps the Lease before another replica takes over", EnvVars: uoEnvs("LEASE_DURATION")},
			&cli.IntFlag{Name: "max-concurrent", Value: 1, Usage: "nodes updating at once", EnvVars: uoEnvs("MAX_CONCURRENT")},
			&cli.BoolFlag{Name: "prepare-ahead", Usage: "while max-concurrent nodes update, the next ones prepare (download and verify, nothing switched) so each starts at perform-update", EnvVars: uoEnvs("PREPARE_AHEAD")},
			&cli.DurationFlag{Name: "pause-between", Value: time.Minute, Usage: "wait after a node is back and healthy before the next starts", EnvVars: uoEnvs("PAUSE_BETWEEN")},
			&cli.StringSliceFlag{Name: "window-days", Usage: "maintenance window days (mon..sun; none: every day)", EnvVars: uoEnvs("WINDOW_DAYS")},
			&cli.StringFlag{Name: "window-start", Usage: "maintenance window start, HH:MM (none: always open)", EnvVars: uoEnvs("WINDOW_START")},
			&cli.StringFlag{Name: "window-end", Usage: "maintenance window end, HH:MM", EnvVars: uoEnvs("WINDOW_END")},
			&cli.StringFlag{Name: "window-tz", Value: "UTC", Usage: "maintenance window time zone (IANA)", EnvVars: uoEnvs("WINDOW_TZ")},
			&cli.StringFlag{Name: "os-image-pattern", Value: uo.DefaultOSImagePattern, Usage: "label nodes whose osImage matches with the interface-version label (\"-\": none)", EnvVars: uoEnvs("OS_IMAGE_PATTERN")},
			&cli.StringSliceFlag{Name: "before-reboot-checks", Usage: "annotations the before-reboot hooks set to \"true\" (the node is labelled <prefix>/before-reboot=true meanwhile)", EnvVars: uoEnvs("BEFORE_REBOOT_CHECKS")},
			&cli.StringSliceFlag{Name: "after-reboot-checks", Usage: "annotations the after-reboot hooks set to \"true\" (the node is labelled <prefix>/after-reboot=true meanwhile)", EnvVars: uoEnvs("AFTER_REBOOT_CHECKS")},
			&cli.StringFlag{Name: "blocking-pod-selector", Usage: "a node running a pod matching this label selector does not start an update", EnvVars: uoEnvs("BLOCKING_POD_SELECTOR")},
			&cli.DurationFlag{Name: "state-timeout", Value: 30 * time.Minute, Usage: "fail a node stuck this long in prepare, perform or reboot", EnvVars: uoEnvs("STATE_TIMEOUT")},
			&cli.DurationFlag{Name: "health-timeout", Value: 15 * time.Minute, Usage: "mark the rollout stuck when drained workloads are not ready again after this long", EnvVars: uoEnvs("HEALTH_TIMEOUT")},
			&cli.DurationFlag{Name: "failure-backoff", Value: 2 * time.Minute, Usage: "wait after a node's first failure, doubled per next failure", EnvVars: uoEnvs("FAILURE_BACKOFF")},
			&cli.IntFlag{Name: "halt-after", Value: 2, Usage: "halt the rollout of a release after failed updates to it (the host failed, fell back or hung) on this many different nodes: no node starts it until a new release is offered or `slipway update-operator resume` (0: never halt)", EnvVars: uoEnvs("HALT_AFTER")},
			&cli.DurationFlag{Name: "failure-backoff-max", Value: time.Hour, Usage: "longest wait between tries of a failing node", EnvVars: uoEnvs("FAILURE_BACKOFF_MAX")},
			&cli.StringFlag{Name: "metrics-addr", Value: ":9480", Usage: "serve Prometheus metrics at http://<addr>/metrics (\"\" = off)", EnvVars: uoEnvs("METRICS_ADDR")},
			uoHealthFlag("HEALTH_ADDR"),
		}, append(uoDrainFlags(), uoAnalysisFlags()...)...),
		Action: func(c *cli.Context) error {
			if _, err := uo.NewKeys(c.String("prefix")); err != nil {
				return cli.Exit(err.Error(), 2)
			}
			cfg, err := kubeConfig(c.String("kubeconfig"))
			if err != nil {
				return err
			}
			var win *window.Window
			if c.String("window-start") != "" {
				if win, err = window.Parse(c.StringSlice("window-days"), c.String("window-start"), c.String("window-end"), c.String("window-tz")); err != nil {
					return cli.Exit(fmt.Sprintf("maintenance window: %v", err), 2)
				}
			}
			st := c.Duration("state-timeout")
			an, err := uoAnalysis(c)
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			return uo.RunController(c.Context, uo.ControllerOptions{
				Config: cfg, Prefix: c.String("prefix"), NodeName: c.String("node-name"), Namespace: c.String("namespace"), LeaseName: c.String("lease"), LeaseDuration: c.Duration("lease-duration"),
				BeforeRebootChecks: c.StringSlice("before-reboot-checks"), AfterRebootChecks: c.StringSlice("after-reboot-checks"),
				OSImagePattern: c.String("os-image-pattern"), BlockingPods: c.String("blocking-pod-selector"), MetricsAddr: c.String("metrics-addr"),
				HealthAddr: c.String("health-addr"),
				Drain:      uoDrainOptions(c),
				Analysis:   an,
				Policy: uo.Policy{MaxConcurrent: c.Int("max-concurrent"), PauseBetween: c.Duration("pause-between"), Window: win, PrepareAhead: c.Bool("prepare-ahead"),
					Backoff: c.Duration("failure-backoff"), BackoffMax: c.Duration("failure-backoff-max"), HaltAfter: c.Int("halt-after"),
					Timeouts: uo.Timeouts{Prepare: st, Perform: st, Reboot: st, Reset: st, Health: c.Duration("health-timeout")}},
				Log: slog.Default(),
			})
		},
	}
}

func uoAgentCommand() *cli.Command {
	return &cli.Command{
		Name:  "agent",
		Usage: "report this node's update state and carry out the controller's intent (run as a DaemonSet)",
		UsageText: `slipway update-operator agent --platform slipway --source https://mirror.example/k3os/releases/latest
slipway update-operator agent --platform bottlerocket-api --api-socket /run/api.sock
slipway update-operator agent --platform command --check-command 'osupdate check' \
    --prepare-command 'osupdate download' --apply-command 'osupdate apply' --reboot-command 'osupdate reboot' \
    --version-command 'osupdate version'`,
		Flags: []cli.Flag{
			prefixFlag(), kubeconfigFlag(),
			&cli.StringFlag{Name: "node-name", Usage: "this node's name (the downward API's spec.nodeName)", EnvVars: []string{"NODE_NAME"}},
			&cli.StringFlag{Name: "platform", Value: platform.NameSlipway, Usage: "slipway, bottlerocket-api or command", EnvVars: uoEnvs("PLATFORM")},
			&cli.StringFlag{Name: "source", Usage: "slipway: release channel URL or mirror directory", EnvVars: uoEnvs("SOURCE")},
			&cli.StringFlag{Name: "system-dir", Value: "/k3os/system", Usage: "slipway: the k3os system directory", EnvVars: uoEnvs("SYSTEM_DIR")},
			&cli.StringFlag{Name: "lock-file", Value: "/run/k3os/upgrade.lock", Usage: "slipway: the upgrade lock", EnvVars: uoEnvs("LOCK_FILE")},
			&cli.StringFlag{Name: "reboot-method", Value: "auto", Usage: "slipway: " + platform.RebootMethods + " (auto: the host's init, told from its PID 1, and from --host-run-dir when that is the host's /run; systemd: SIGRTMIN+5 to PID 1, no system bus; logind: over the system bus, which the manifest does not mount)", EnvVars: uoEnvs("REBOOT_METHOD")},
			&cli.StringFlag{Name: "host-run-dir", Value: "/run", Usage: "slipway: where the host's /run is seen, to tell its init by its control FIFOs (the manifest mounts none: a mount of /run hands the pod every host socket)", EnvVars: uoEnvs("HOST_RUN_DIR")},
			&cli.StringFlag{Name: "api-socket", Value: platform.DefaultAPISocket, Usage: "bottlerocket-api: the host API's unix socket", EnvVars: uoEnvs("API_SOCKET")},
			&cli.StringFlag{Name: "check-command", Usage: "command: prints the available version (nothing when up to date)", EnvVars: uoEnvs("CHECK_COMMAND")},
			&cli.StringFlag{Name: "prepare-command", Usage: "command: downloads the update", EnvVars: uoEnvs("PREPARE_COMMAND")},
			&cli.StringFlag{Name: "apply-command", Usage: "command: makes the next boot the update", EnvVars: uoEnvs("APPLY_COMMAND")},
			&cli.StringFlag{Name: "reboot-command", Usage: "command (and slipway with --reboot-method=command): reboots", EnvVars: uoEnvs("REBOOT_COMMAND")},
			&cli.StringFlag{Name: "version-command", Usage: "command (required): prints the running version; an update succeeds only when the host comes back running the version chosen", EnvVars: uoEnvs("VERSION_COMMAND")},
			&cli.StringFlag{Name: "reset-command", Usage: "command: discards a prepared update after a failed one (optional; without it a reset-state does nothing on the host)", EnvVars: uoEnvs("RESET_COMMAND")},
			&cli.StringFlag{Name: "boot-id-file", Value: platform.DefaultBootIDFile, Usage: "the host's boot ID (a new one after reboot-update is the reboot done)", EnvVars: uoEnvs("BOOT_ID_FILE")},
			&cli.DurationFlag{Name: "check-interval", Value: 30 * time.Minute, Usage: "how often a resting node checks for updates", EnvVars: uoEnvs("CHECK_INTERVAL")},
			&cli.DurationFlag{Name: "check-timeout", Value: 10 * time.Minute, Usage: "a check for updates still running after this long is an error (a hung host call)", EnvVars: uoEnvs("CHECK_TIMEOUT")},
			&cli.DurationFlag{Name: "step-timeout", Value: 25 * time.Minute, Usage: "a prepare, perform, reset or reboot still running after this long is an error with the reason (keep it under the controller's --state-timeout)", EnvVars: uoEnvs("STEP_TIMEOUT")},
			&cli.StringFlag{Name: "metrics-addr", Value: "", Usage: "serve Prometheus metrics at http://<addr>/metrics (\"\" = off)", EnvVars: uoEnvs("AGENT_METRICS_ADDR")},
			uoHealthFlag("AGENT_HEALTH_ADDR"),
		},
		Action: func(c *cli.Context) error {
			agentmem.Start(c.Context, agentmem.Options{})
			if _, err := uo.NewKeys(c.String("prefix")); err != nil {
				return cli.Exit(err.Error(), 2)
			}
			p, err := uoPlatform(c)
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			cfg, err := kubeConfig(c.String("kubeconfig"))
			if err != nil {
				return err
			}
			return uo.RunAgent(c.Context, uo.AgentOptions{Config: cfg, Prefix: c.String("prefix"), NodeName: c.String("node-name"),
				Platform: p, BootID: uo.BootIDFile(c.String("boot-id-file")), CheckInterval: c.Duration("check-interval"), CheckTimeout: c.Duration("check-timeout"), StepTimeout: c.Duration("step-timeout"),
				MetricsAddr: c.String("metrics-addr"), HealthAddr: c.String("health-addr"), Log: slog.Default()})
		},
	}
}

func uoPlatform(c *cli.Context) (platform.Platform, error) {
	switch name := c.String("platform"); name {
	case platform.NameSlipway:
		if c.String("source") == "" {
			return nil, fmt.Errorf("--platform slipway needs --source (a release channel URL or a mirror directory)")
		}
		src, err := channel.New(c.String("source"), channel.Options{GitHubToken: os.Getenv("GITHUB_TOKEN")})
		if err != nil {
			return nil, err
		}
		r, err := platform.Rebooter(c.String("reboot-method"), c.String("reboot-command"), "/proc", c.String("host-run-dir"))
		if err != nil {
			return nil, err
		}
		return &platform.Slipway{SystemDir: c.String("system-dir"), Source: src, LockFile: c.String("lock-file"), Rebooter: r}, nil
	case platform.NameBottlerocket:
		return &platform.Bottlerocket{Socket: c.String("api-socket")}, nil
	case platform.NameCommand:
		p := &platform.Command{CheckCmd: strings.Fields(c.String("check-command")), PrepareCmd: strings.Fields(c.String("prepare-command")),
			ApplyCmd: strings.Fields(c.String("apply-command")), RebootCmd: strings.Fields(c.String("reboot-command")), VersionCmd: strings.Fields(c.String("version-command")),
			ResetCmd: strings.Fields(c.String("reset-command"))}
		return p, p.Validate()
	default:
		return nil, platform.UnknownError(name)
	}
}

func uoManifestCommand() *cli.Command {
	return &cli.Command{
		Name:      "manifest",
		Usage:     "print the manifest: namespace, service accounts, least-privilege RBAC, the agent's own-Node admission policy, controller Deployment, agent DaemonSet",
		UsageText: "slipway update-operator manifest [--platform bottlerocket-api] [--prefix bottlerocket.aws] [--agent-arg=--source=URL] | kubectl apply -f -",
		Flags: []cli.Flag{
			prefixFlag(),
			&cli.StringFlag{Name: "namespace", Value: uo.DefaultNamespace, Usage: "namespace of the controller and agents", EnvVars: uoEnvs("NAMESPACE")},
			&cli.StringFlag{Name: "image", Usage: "image of the controller and agents (default: this version's)", EnvVars: uoEnvs("IMAGE")},
			&cli.StringFlag{Name: "platform", Value: platform.NameSlipway, Usage: "the agents' platform", EnvVars: uoEnvs("PLATFORM")},
			&cli.StringSliceFlag{Name: "agent-arg", Usage: "an argument added to the agent's command line (repeat)"},
			&cli.StringSliceFlag{Name: "controller-arg", Usage: "an argument added to the controller's command line (repeat)"},
			&cli.StringFlag{Name: "os-image-pattern", Usage: "the controller's --os-image-pattern: the nodes it labels for the agent DaemonSet (default: the platform's OS, ^bottlerocket or ^k3os; both for command)", EnvVars: uoEnvs("MANIFEST_OS_IMAGE_PATTERN")},
		},
		Action: func(c *cli.Context) error {
			if n := c.String("platform"); !slices.Contains([]string{platform.NameSlipway, platform.NameBottlerocket, platform.NameCommand}, n) {
				return cli.Exit(platform.UnknownError(n).Error(), 2)
			}
			return uo.Manifest(c.Context, uo.ManifestOptions{Namespace: c.String("namespace"), Image: c.String("image"), Prefix: c.String("prefix"),
				Platform: c.String("platform"), AgentArgs: c.StringSlice("agent-arg"), ControllerArgs: c.StringSlice("controller-arg"),
				OSImagePattern: c.String("os-image-pattern"), Out: c.App.Writer})
		},
	}
}

func uoStatusCommand() *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "one row per node: state, intent wanted and active, current and available version, cordon, last transition, failures",
		UsageText: "slipway update-operator status [--prefix P] [--json]",
		Flags: []cli.Flag{prefixFlag(), kubeconfigFlag(),
			&cli.StringFlag{Name: "namespace", Value: uo.DefaultNamespace, Usage: "namespace of the controller (its fleet state: a halted rollout)", EnvVars: uoEnvs("NAMESPACE")},
			&cli.BoolFlag{Name: "json", Aliases: []string{"o"}, Usage: "print JSON"}},
		Action: func(c *cli.Context) error {
			cfg, err := kubeConfig(c.String("kubeconfig"))
			if err != nil {
				return err
			}
			return uo.Status(c.Context, uo.StatusOptions{Config: cfg, Prefix: c.String("prefix"), Namespace: c.String("namespace"), JSON: c.Bool("json"), Out: c.App.Writer})
		},
	}
}

func uoResumeCommand() *cli.Command {
	return &cli.Command{
		Name:      "resume",
		Usage:     "lift the brake: the controller forgets the failures of the releases it halted (--halt-after) and starts them again",
		UsageText: "slipway update-operator resume [--prefix P] [--namespace NS]",
		Flags: []cli.Flag{prefixFlag(), kubeconfigFlag(),
			&cli.StringFlag{Name: "namespace", Value: uo.DefaultNamespace, Usage: "namespace of the controller", EnvVars: uoEnvs("NAMESPACE")}},
		Action: func(c *cli.Context) error {
			cfg, err := kubeConfig(c.String("kubeconfig"))
			if err != nil {
				return err
			}
			kc, err := kube.NewForConfig(cfg)
			if err != nil {
				return err
			}
			if err := uo.Resume(c.Context, kc, c.String("namespace"), c.String("prefix")); err != nil {
				return err
			}
			fmt.Fprintln(c.App.Writer, "asked the controller to resume; it does within its --resync")
			return nil
		},
	}
}

// oldOperatorArgs rewrites the command line of the old operator (started
// as dogswatch or bottlerocket-update-operator: -controller or -agent,
// single-dash flags, prefix bottlerocket.aws) into slipway's.
func oldOperatorArgs(args []string) ([]string, bool) {
	if len(args) == 0 || !slices.Contains(uo.OldProgramNames, filepath.Base(args[0])) {
		return nil, false
	}
	var global, mode, rest []string
	prefix, hasPlatform := false, false
	for _, a := range args[1:] {
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case name == "controller" || name == "agent":
			mode = []string{name}
		case name == "debug":
			global = append(global, "--debug")
		case !strings.HasPrefix(a, "-"):
			rest = append(rest, a)
		default:
			if name == "nodeName" {
				name = "node-name"
			}
			prefix = prefix || name == "prefix"
			hasPlatform = hasPlatform || name == "platform"
			flag := "--" + name
			if hasVal {
				flag += "=" + val
			}
			rest = append(rest, flag)
		}
	}
	if !prefix {
		rest = append([]string{"--prefix", uo.BottlerocketPrefix}, rest...)
	}
	if len(mode) == 1 && mode[0] == "agent" && !hasPlatform {
		// The old operator's host-API agent (interface 2.0.0): Bottlerocket's API.
		rest = append([]string{"--platform", platform.NameBottlerocket}, rest...)
	}
	out := append([]string{"slipway"}, global...)
	out = append(append(append(out, "update-operator"), mode...), rest...)
	return out, true
}

// uoDrainFlags are the controller's drain flags. The defaults drain what
// the Bottlerocket update operator drains (and `kubectl drain
// --delete-emptydir-data --force`, minus the deletes): every pod but
// DaemonSet and mirror pods, through the Eviction API.
func uoDrainFlags() []cli.Flag {
	d := uo.DefaultDrain()
	return []cli.Flag{
		&cli.DurationFlag{Name: "drain-timeout", Value: d.Timeout, Usage: "give up a drain after this long (the update fails, the node is uncordoned)", EnvVars: uoEnvs("DRAIN_TIMEOUT")},
		&cli.BoolFlag{Name: "drain-delete-emptydir", Value: d.DeleteEmptyDirData, Usage: "evict pods with emptyDir volumes (their data is lost); =false: such pods block the drain", EnvVars: uoEnvs("DRAIN_DELETE_EMPTYDIR")},
		&cli.BoolFlag{Name: "drain-unmanaged", Value: d.EvictUnmanaged, Usage: "evict pods no controller owns (nothing recreates them); =false: such pods block the drain", EnvVars: uoEnvs("DRAIN_UNMANAGED")},
		&cli.BoolFlag{Name: "drain-force", Value: d.Force, Usage: "delete the pods still there at --drain-timeout (PodDisruptionBudgets overridden)", EnvVars: uoEnvs("DRAIN_FORCE")},
		&cli.Int64Flag{Name: "drain-grace-period", Value: -1, Usage: "seconds each evicted pod gets to terminate (-1: the pod's own)", EnvVars: uoEnvs("DRAIN_GRACE_PERIOD")},
	}
}

func uoDrainOptions(c *cli.Context) drain.Options {
	o := drain.Options{Timeout: c.Duration("drain-timeout"), DeleteEmptyDirData: c.Bool("drain-delete-emptydir"),
		EvictUnmanaged: c.Bool("drain-unmanaged"), Force: c.Bool("drain-force")}
	if g := c.Int64("drain-grace-period"); g >= 0 {
		o.GracePeriodSeconds = &g
	}
	return o
}

// uoHealthFlag is where a component serves /healthz (its loops beat) and
// /readyz (its Node informer synced), the manifest's probes.
func uoHealthFlag(env string) cli.Flag {
	return &cli.StringFlag{Name: "health-addr", Value: uo.DefaultHealthAddr, Usage: "serve /healthz and /readyz at http://<addr> (\"\" = off)", EnvVars: uoEnvs(env)}
}
