// Command slipway-admission serves slipway's admission webhook: the
// slipway-admission Deployment of the webhook isolation (`slipway ops
// manifest --isolation=webhook`), which enforces the manifest's admission
// policies on API servers that lack ValidatingAdmissionPolicy (Kubernetes
// before 1.30, such as the k3s of the last k3os releases). It is a binary
// of its own beside slipway, in the same image: the CEL it evaluates the
// policies with costs about 7 MiB of resident memory at start, which no
// node's agent should pay.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/webhook"
)

func main() {
	app := &cli.App{Name: "slipway-admission", Usage: "serve slipway's admission webhook (Kubernetes 1.22-1.29)"}
	cmd := admissionWebhookCommand()
	app.Flags, app.Action = cmd.Flags, cmd.Action
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := app.RunContext(ctx, os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "slipway-admission:", err)
		os.Exit(1)
	}
}

// admissionWebhookCommand renders the policies from the same options as
// the manifest, makes its serving certificate, writes its CA into its
// webhook configuration and serves.
func admissionWebhookCommand() *cli.Command {
	return &cli.Command{
		Name:  "slipway-admission",
		Usage: "serve the admission webhook that holds the agent and the controller to the manifest's policies on Kubernetes 1.22-1.29 (the slipway-admission Deployment)",
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
			if c.String("config-name") == "" || c.String("service-host") == "" {
				return fmt.Errorf("--config-name and --service-host are required: run it from the manifest of `slipway ops manifest --isolation=webhook`")
			}
			cfg, err := kubeConfig(c.String("kubeconfig"))
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			o := manifest.Options{Namespace: c.String("namespace"), Isolation: manifest.IsolationWebhook, Image: c.String("image"), GitHubDownloadBase: c.String("github-download-base"),
				HostSystemDir: c.String("host-system-dir"), HostLockDir: c.String("host-lock-dir"), JobImages: c.StringSlice("job-image"),
				JobCommand: c.StringSlice("job-command"), MirrorDirs: c.StringSlice("mirror-dir"), TokenSecrets: c.StringSlice("token-secret"),
				ReleaseSources: c.StringSlice("release-source")}
			cs, err := kube.NewForConfig(cfg)
			if err != nil {
				return err
			}
			srv, err := webhook.New(manifest.Policies(o), func(ctx context.Context, ns, name string) (*corev1.Pod, error) {
				return cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			}, log)
			if err != nil {
				return err
			}
			ca, cert, err := webhook.SelfSigned([]string{c.String("service-host"), c.String("service-host") + ".cluster.local"})
			if err != nil {
				return err
			}
			l, err := net.Listen("tcp", ":"+strconv.Itoa(c.Int("port")))
			if err != nil {
				return fmt.Errorf("listen for the API server's webhook calls: %w", err)
			}
			if err := webhook.PatchCABundle(c.Context, cfg, c.String("config-name"), ca); err != nil {
				l.Close()
				return err
			}
			log.Info("serving the admission webhook", "port", c.Int("port"), "policies", len(manifest.Policies(o)), "configuration", c.String("config-name"))
			return webhook.Serve(c.Context, l, cert, srv)
		},
	}
}

func envs(name string) []string { return []string{"SLIPWAY_" + name} }

// kubeConfig reads path, or, when it is empty, the pod's in-cluster configuration.
func kubeConfig(path string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("read the kubeconfig %q (empty: the in-cluster configuration): %w", path, err)
	}
	return cfg, nil
}
