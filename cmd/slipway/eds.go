package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/eds"
	edscli "slipway.dev/slipway/ops/eds/cli"
	edsclient "slipway.dev/slipway/ops/generated/eds/clientset/versioned/typed/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/manifest"
)

// edsCommand is `slipway eds`, also run as the kubectl plugin kubectl-eds.
func edsCommand() *cli.Command {
	return &cli.Command{
		Name:    "eds",
		Aliases: []string{"kubectl-eds"},
		Usage:   "ExtendedDaemonSet: daemons with canary and rolling updates (controller, manifest, and the kubectl-eds commands)",
		Description: `Installed as kubectl-eds (a symlink to slipway on the PATH), these are kubectl eds ... commands.
Examples:
  slipway eds manifest | kubectl apply -f -
  kubectl eds get                      # every ExtendedDaemonSet of the namespace
  kubectl eds canary pods agent        # the canary's pods
  kubectl eds canary validate agent    # end a manual canary: roll it out
  kubectl eds canary fail agent        # give up the canary: restore the active template
  kubectl eds diff agent               # the template change the canary runs
  kubectl eds freeze agent             # stop every creation and deletion`,
		Flags:       kubectlFlags(),
		Subcommands: append([]*cli.Command{edsControllerCommand(), edsManifestCommand()}, withKubectlFlags(edsUserCommands())...),
	}
}

// kubectlFlags are the flags every kubectl-eds command takes, before or
// after its name: kubectl's own connection flags (the flags of
// cli-runtime's genericclioptions, as every kubectl plugin takes them), -A and -o.
func kubectlFlags() []cli.Flag {
	str := func(name, usage string, aliases ...string) cli.Flag {
		return &cli.StringFlag{Name: name, Aliases: aliases, Usage: usage}
	}
	return []cli.Flag{
		// Not bound to KUBECONFIG: that may list several files, which
		// clientcmd's loading rules merge (the flag names one file).
		str("kubeconfig", "kubeconfig file (default: the files KUBECONFIG lists, merged; else ~/.kube/config, or in-cluster)"),
		str("namespace", "namespace (default: the kubeconfig context's)", "n"),
		str("context", "the kubeconfig context to use"),
		str("cluster", "the kubeconfig cluster to use"),
		str("user", "the kubeconfig user to use"),
		str("server", "the API server's address", "s"),
		str("token", "bearer token for the API server"),
		str("as", "user to impersonate"),
		&cli.StringSliceFlag{Name: "as-group", Usage: "group to impersonate (repeat for several)"},
		str("as-uid", "UID to impersonate"),
		&cli.StringSliceFlag{Name: "as-user-extra", Usage: "extra field of the impersonated user, KEY=VALUE (repeat for several)"},
		str("username", "username for basic authentication to the API server"),
		str("password", "password for basic authentication to the API server"),
		str("cache-dir", "kubectl's discovery cache directory (accepted for kubectl's sake; kubectl-eds does no discovery)"),
		&cli.BoolFlag{Name: "disable-compression", Usage: "do not ask the API server to compress its answers"},
		str("certificate-authority", "CA certificate file"),
		str("client-certificate", "client certificate file"),
		str("client-key", "client key file"),
		str("tls-server-name", "server name for the server's certificate"),
		&cli.BoolFlag{Name: "insecure-skip-tls-verify", Usage: "do not check the server's certificate"},
		str("request-timeout", "how long to wait for one request (0: no limit)"),
		&cli.BoolFlag{Name: "all-namespaces", Aliases: []string{"A"}, Usage: "list across all namespaces (get, get-ers)"},
		str("output", "output format: json, yaml or wide (default: a table)", "o"),
	}
}

// boolFlags are the kubectl-eds flags that take no value.
var boolFlags = map[string]bool{"A": true, "all-namespaces": true, "insecure-skip-tls-verify": true, "disable-compression": true}

// withKubectlFlags adds kubectlFlags to every command with an action, at any depth.
func withKubectlFlags(cmds []*cli.Command) []*cli.Command {
	for _, c := range cmds {
		if c.Action != nil {
			c.Flags = append(c.Flags, kubectlFlags()...)
		}
		withKubectlFlags(c.Subcommands)
	}
	return cmds
}

func edsControllerCommand() *cli.Command {
	return &cli.Command{
		Name:  "controller",
		Usage: "run the ExtendedDaemonSet controller",
		UsageText: `slipway eds controller [--namespace NS] [--leader-elect --lease-namespace NS] [--install-crds]
   KUBECONFIG=~/.kube/config slipway eds controller --install-crds   # from a workstation`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "watch-namespace", Usage: "reconcile only this namespace (default: all; also -n on eds)", EnvVars: envs("EDS_NAMESPACE")},
			&cli.BoolFlag{Name: "install-crds", Usage: "create or update the eds.slipway.dev CRDs at start", EnvVars: envs("EDS_INSTALL_CRDS")},
			&cli.BoolFlag{Name: "leader-elect", Usage: "reconcile only while holding the controller's Lease (run several replicas)", EnvVars: envs("EDS_LEADER_ELECT")},
			&cli.StringFlag{Name: "lease-namespace", Usage: "namespace of the leader Lease", EnvVars: envs("EDS_LEASE_NAMESPACE")},
			&cli.StringFlag{Name: "identity", Usage: "this replica's name in the Lease (default: host name and pid)", EnvVars: envs("EDS_IDENTITY")},
			&cli.StringFlag{Name: "metrics-addr", Value: ":9480", Usage: "serve Prometheus metrics at http://<addr>/metrics (\"\" = off)", EnvVars: envs("EDS_METRICS_ADDR")},
			&cli.IntFlag{Name: "workers", Value: 4, Usage: "ExtendedDaemonSets reconciled at once", EnvVars: envs("EDS_WORKERS")},
			&cli.Float64Flag{Name: "kube-api-qps", Value: 50, Usage: "requests per second to the API server", EnvVars: envs("EDS_KUBE_API_QPS")},
			&cli.IntFlag{Name: "kube-api-burst", Value: 100, Usage: "burst of requests to the API server", EnvVars: envs("EDS_KUBE_API_BURST")},
		},
		Action: func(c *cli.Context) error {
			cfg, _, err := edsKubeConfig(c)
			if err != nil {
				return err
			}
			ns := c.String("watch-namespace")
			if ns == "" {
				ns = c.String("namespace")
			}
			return eds.Run(c.Context, eds.Options{Config: cfg, Namespace: ns, InstallCRDs: c.Bool("install-crds"),
				LeaderElect: c.Bool("leader-elect"), LeaseNamespace: c.String("lease-namespace"), Identity: c.String("identity"),
				MetricsAddr: c.String("metrics-addr"), Workers: c.Int("workers"),
				QPS: float32(c.Float64("kube-api-qps")), Burst: c.Int("kube-api-burst")})
		},
	}
}

func edsManifestCommand() *cli.Command {
	return &cli.Command{
		Name:      "manifest",
		Usage:     "print the CRDs, least-privilege RBAC and the controller Deployment",
		UsageText: "slipway eds manifest [--manifest-namespace NS] [--image IMAGE] | kubectl apply -f -",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "manifest-namespace", Value: manifest.DefaultNamespace, Usage: "namespace of the controller", EnvVars: envs("NAMESPACE")},
			&cli.StringFlag{Name: "image", Value: manifest.DefaultImage(), Usage: "image of the controller", EnvVars: envs("IMAGE")},
		},
		Action: func(c *cli.Context) error {
			return eds.WriteManifest(eds.ManifestOptions{Namespace: c.String("manifest-namespace"), Image: c.String("image"), Out: c.App.Writer})
		},
	}
}

// edsKubeConfig loads the client configuration the way kubectl does, from
// kubectl's connection flags, and returns it with the namespace to use (-n,
// else the context's, else default). It fills client-go's clientcmd loading
// rules and overrides flag by flag as cli-runtime's
// genericclioptions.ConfigFlags.ToRawKubeConfigLoader does: KUBECONFIG's
// files merged, --kubeconfig one explicit file. ConfigFlags itself is not
// linked: it brings client-go's discovery client and every-group scheme,
// cobra and kustomize, which every slipway agent (the same binary) would
// pay for (measured: +12 MB of binary, +0.9 MiB anonymous memory per idle
// agent; TestBinaryDoesNotLinkClientGoScheme). That the result is
// ConfigFlags' own is a test: TestKubectlEDSConnectionIsConfigFlags builds
// both for a table of flags and KUBECONFIG values and compares them.
func edsKubeConfig(c *cli.Context) (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if v, ok := lookupSet(c, "kubeconfig"); ok {
		rules.ExplicitPath = v
	}
	o := &clientcmd.ConfigOverrides{}
	for name, field := range map[string]*string{
		"namespace": &o.Context.Namespace, "context": &o.CurrentContext,
		"cluster": &o.Context.Cluster, "user": &o.Context.AuthInfo, "server": &o.ClusterInfo.Server,
		"token": &o.AuthInfo.Token, "as": &o.AuthInfo.Impersonate, "as-uid": &o.AuthInfo.ImpersonateUID,
		"certificate-authority": &o.ClusterInfo.CertificateAuthority, "client-certificate": &o.AuthInfo.ClientCertificate,
		"client-key": &o.AuthInfo.ClientKey, "tls-server-name": &o.ClusterInfo.TLSServerName, "request-timeout": &o.Timeout,
		"username": &o.AuthInfo.Username, "password": &o.AuthInfo.Password,
	} {
		if v, ok := lookupSet(c, name); ok {
			*field = v
		}
	}
	o.AuthInfo.ImpersonateGroups = lookupSlice(c, "as-group")
	o.ClusterInfo.InsecureSkipTLSVerify = lookupBool(c, "insecure-skip-tls-verify")
	o.ClusterInfo.DisableCompression = lookupBool(c, "disable-compression")
	for _, kv := range lookupSlice(c, "as-user-extra") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, "", fmt.Errorf("--as-user-extra %q: want KEY=VALUE", kv)
		}
		if o.AuthInfo.ImpersonateUserExtra == nil {
			o.AuthInfo.ImpersonateUserExtra = map[string][]string{}
		}
		o.AuthInfo.ImpersonateUserExtra[k] = append(o.AuthInfo.ImpersonateUserExtra[k], v)
	}
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, o)
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("no cluster to talk to (%w): set KUBECONFIG or --kubeconfig (or --server and --token)", err)
	}
	ns, _, err := loader.Namespace()
	if err != nil || ns == "" {
		ns = "default"
	}
	return cfg, ns, nil
}

// lookupSet reads a flag of this command or of any parent, if set.
func lookupSet(c *cli.Context, name string) (string, bool) {
	for _, ctx := range c.Lineage() {
		if ctx.IsSet(name) {
			return ctx.String(name), true
		}
	}
	return "", false
}

func lookupSlice(c *cli.Context, name string) []string {
	var out []string
	for _, ctx := range c.Lineage() {
		if ctx.IsSet(name) {
			out = append(out, ctx.StringSlice(name)...)
		}
	}
	return out
}

func lookupBool(c *cli.Context, name string) bool {
	for _, ctx := range c.Lineage() {
		if ctx.Bool(name) {
			return true
		}
	}
	return false
}

// lookup reads a flag of this command or of any parent.
func lookup(c *cli.Context, name string) string {
	for _, ctx := range c.Lineage() {
		if ctx.IsSet(name) {
			return ctx.String(name)
		}
	}
	return ""
}

// edsClient builds the kubectl-eds client from the flags.
func edsClient(c *cli.Context) (*edscli.Client, error) {
	out := lookup(c, "output")
	if err := edscli.CheckOutput(out); err != nil {
		return nil, err
	}
	cfg, ns, err := edsKubeConfig(c)
	if err != nil {
		return nil, err
	}
	k, err := kube.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("build the Kubernetes client: %w", err)
	}
	e, err := edsclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("build the ExtendedDaemonSet client: %w", err)
	}
	all := false
	for _, ctx := range c.Lineage() {
		all = all || ctx.Bool("all-namespaces")
	}
	return &edscli.Client{Kube: k, EDS: e, Namespace: ns, AllNamespaces: all, Output: out, Out: c.App.Writer}, nil
}

// named is an action on the ExtendedDaemonSet named by the first argument.
// Flags after the name (kubectl eds pods agent -n ops -o yaml) are read too.
func named(fn func(c *cli.Context, cl *edscli.Client, name string) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		args := c.Args().Slice()
		name := ""
		if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			name, args = args[0], args[1:]
		}
		for i := 0; i < len(args); i++ {
			flag := strings.TrimLeft(args[i], "-")
			value, inline := "", false
			if k, v, ok := strings.Cut(flag, "="); ok {
				flag, value, inline = k, v, true
			}
			f := c.Command.VisibleFlags()
			known := false
			for _, def := range f {
				for _, n := range def.Names() {
					if n == flag && !known {
						known, flag = true, def.Names()[0] // set by its long name: lookups read that
					}
				}
			}
			if !known || !strings.HasPrefix(args[i], "-") {
				return fmt.Errorf("%s takes one ExtendedDaemonSet name; %q is not a flag of it (see --help)", c.Command.Name, args[i])
			}
			if !inline && !boolFlags[flag] {
				if i+1 >= len(args) {
					return fmt.Errorf("flag %s needs a value", args[i])
				}
				i++
				value = args[i]
			} else if !inline {
				value = "true"
			}
			if err := c.Set(flag, value); err != nil {
				return fmt.Errorf("flag %s: %w", args[i], err)
			}
		}
		cl, err := edsClient(c)
		if err != nil {
			return err
		}
		return fn(c, cl, name)
	}
}

func flagCommand(name, usage, key string, on bool, done string, aliases ...string) *cli.Command {
	return &cli.Command{Name: name, Aliases: aliases, Usage: usage, ArgsUsage: "NAME",
		Action: named(func(c *cli.Context, cl *edscli.Client, n string) error {
			return cl.SetFlag(c.Context, n, key, on, done)
		})}
}

func edsUserCommands() []*cli.Command {
	return []*cli.Command{
		{Name: "get", Usage: "list ExtendedDaemonSets (or show one)", ArgsUsage: "[NAME]",
			Action: named(func(c *cli.Context, cl *edscli.Client, n string) error { return cl.Get(c.Context, n) })},
		{Name: "get-ers", Usage: "list the ExtendedDaemonSetReplicaSets (of NAME)", ArgsUsage: "[NAME]",
			Action: named(func(c *cli.Context, cl *edscli.Client, n string) error { return cl.GetERS(c.Context, n) })},
		{Name: "pods", Usage: "list an ExtendedDaemonSet's pods", ArgsUsage: "NAME",
			Flags: []cli.Flag{&cli.StringFlag{Name: "select", Value: edscli.SelectAll, Usage: "canary, not-ready or all"}},
			Action: named(func(c *cli.Context, cl *edscli.Client, n string) error {
				return cl.Pods(c.Context, n, c.String("select"))
			})},
		{Name: "canary", Usage: "act on the running canary: validate, pause, unpause, fail, pods, analysis", Subcommands: []*cli.Command{
			{Name: "validate", Usage: "validate the canary: roll it out to every node", ArgsUsage: "NAME",
				Action: named(func(c *cli.Context, cl *edscli.Client, n string) error { return cl.CanaryValidate(c.Context, n) })},
			{Name: "pause", Usage: "pause the canary", ArgsUsage: "NAME",
				Flags: []cli.Flag{&cli.StringFlag{Name: "reason", Value: "ManuallyPaused", Usage: "why (shown as the status reason)"}},
				Action: named(func(c *cli.Context, cl *edscli.Client, n string) error {
					return cl.CanaryPause(c.Context, n, c.String("reason"))
				})},
			{Name: "unpause", Usage: "resume a paused canary (auto-pause stays off for it)", ArgsUsage: "NAME",
				Action: named(func(c *cli.Context, cl *edscli.Client, n string) error { return cl.CanaryUnpause(c.Context, n) })},
			{Name: "fail", Usage: "fail the canary: restore the active template", ArgsUsage: "NAME",
				Action: named(func(c *cli.Context, cl *edscli.Client, n string) error { return cl.CanaryFail(c.Context, n) })},
			{Name: "pods", Usage: "list the canary's pods", ArgsUsage: "NAME",
				Action: named(func(c *cli.Context, cl *edscli.Client, n string) error {
					return cl.Pods(c.Context, n, edscli.SelectCanary)
				})},
			{Name: "analysis", Usage: "show the canary's analysis: its queries and the latest verdict (or what failed the last canary)", ArgsUsage: "NAME",
				Action: named(func(c *cli.Context, cl *edscli.Client, n string) error { return cl.CanaryAnalysis(c.Context, n) })},
		}},
		{Name: "migrate-from-datadog", Aliases: []string{"migrate"}, ArgsUsage: "NAME",
			Usage:  "hand DataDog's ExtendedDaemonSet NAME (datadoghq.com/v1alpha1), its pods and settings to slipway, restarting no pod",
			Action: named(func(c *cli.Context, cl *edscli.Client, n string) error { return cl.MigrateFromDataDog(c.Context, n) })},
		flagCommand("pause-rollout", "stop deleting outdated pods (new nodes still get theirs)", v1.AnnotationRollingUpdatePaused, true, "rolling update paused", "pause-rolling-update"),
		flagCommand("unpause-rollout", "resume the rolling update", v1.AnnotationRollingUpdatePaused, false, "rolling update resumed", "unpause-rolling-update"),
		flagCommand("freeze", "stop every pod creation and deletion", v1.AnnotationRolloutFrozen, true, "rollout frozen", "freeze-rollout"),
		flagCommand("unfreeze", "resume creations and deletions", v1.AnnotationRolloutFrozen, false, "rollout unfrozen", "unfreeze-rollout"),
		{Name: "diff", Usage: "show the template change between the active ERS and the spec (the canary)", ArgsUsage: "NAME",
			Action: named(func(c *cli.Context, cl *edscli.Client, n string) error { return cl.Diff(c.Context, n) })},
	}
}
