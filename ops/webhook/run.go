package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/manifest"
)

// Options of Run: the webhook of one manifest.
type Options struct {
	// Manifest is the manifest's options the policies are rendered from
	// (its Isolation is taken to be the webhook's).
	Manifest manifest.Options
	// ConfigName is the ValidatingWebhookConfiguration whose CA bundle the
	// webhook writes (required).
	ConfigName string
	// ServiceHost is the DNS name of the webhook's Service, which its
	// serving certificate names (required; also name.cluster.local).
	ServiceHost string
	// Port is the HTTPS port (default manifest.AdmissionPort).
	Port int
	// Config reaches the API server (required).
	Config *rest.Config
	// Log receives structured logs (default slog.Default()).
	Log *slog.Logger
}

// Run renders the manifest's policies, compiles them, makes the serving
// certificate, writes its CA into the webhook configuration and serves
// until ctx ends: the slipway-admission Deployment (`slipway ops webhook`).
func Run(ctx context.Context, o Options) error {
	if o.ConfigName == "" || o.ServiceHost == "" {
		return errors.New("--config-name and --service-host are required: run it as the manifest of `slipway ops manifest --isolation=webhook` does")
	}
	if o.Config == nil {
		return errors.New("the webhook needs a connection to the API server: run it in the cluster or pass --kubeconfig")
	}
	if o.Port == 0 {
		o.Port = manifest.AdmissionPort
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	o.Manifest.Isolation = manifest.IsolationWebhook
	cs, err := kube.NewForConfig(o.Config)
	if err != nil {
		return fmt.Errorf("build the Kubernetes client: %w", err)
	}
	policies := manifest.Policies(o.Manifest)
	srv, err := New(policies, func(ctx context.Context, ns, name string) (*corev1.Pod, error) {
		return cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	}, o.Log)
	if err != nil {
		return err
	}
	ca, cert, err := SelfSigned([]string{o.ServiceHost, o.ServiceHost + ".cluster.local"})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", ":"+strconv.Itoa(o.Port))
	if err != nil {
		return fmt.Errorf("listen for the API server's webhook calls: %w", err)
	}
	if err := PatchCABundle(ctx, o.Config, o.ConfigName, ca); err != nil {
		l.Close()
		return err
	}
	o.Log.Info("serving the admission webhook", "port", o.Port, "policies", len(policies), "configuration", o.ConfigName)
	return Serve(ctx, l, cert, srv)
}
