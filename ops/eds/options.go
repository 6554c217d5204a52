// Package eds is the ExtendedDaemonSet controller, `slipway eds controller`:
// it runs one pod of an ExtendedDaemonSet's template on every eligible node
// (watching Nodes, so a new node gets its pod at once), keeps one
// ExtendedDaemonSetReplicaSet per template hash, runs a changed template on
// a few canary nodes first (auto-pause, auto-fail, auto or manual
// validation) and then rolls it through the other nodes under
// maxUnavailable. It also holds the logic of the kubectl-eds commands
// (cli.go). Decisions live in ops/eds/plan; this package wires them to the API.
package eds

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"k8s.io/client-go/rest"
)

// Options configure the controller.
type Options struct {
	// Config reaches the API server (required).
	Config *rest.Config
	// Namespace limits the controller to one namespace ("" = all).
	Namespace string
	// InstallCRDs creates or updates the eds.slipway.dev CRDs at start.
	InstallCRDs bool
	// LeaderElect runs the controller only while it holds the Lease
	// LeaseName in LeaseNamespace.
	LeaderElect    bool
	LeaseNamespace string
	LeaseName      string
	// Identity names this process in the Lease (default: host name and pid).
	Identity string
	// MetricsAddr serves Prometheus metrics at /metrics ("" = off).
	MetricsAddr string
	// Workers is how many ExtendedDaemonSets sync at once (default 4).
	Workers int
	// QPS and Burst bound the controller's requests to the API server when
	// Config sets none (default 50 and 100; kube-controller-manager's are 20 and 30).
	QPS   float32
	Burst int
	// Log receives the controller's logs (default slog.Default()).
	Log *slog.Logger
	// Now is the clock (default time.Now); tests do not replace it.
	Now func() time.Time
}

func (o Options) withDefaults() (Options, error) {
	if o.Config == nil {
		return o, errors.New("eds: no API server configuration (set --kubeconfig or KUBECONFIG, or run in a cluster)")
	}
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.QPS <= 0 {
		o.QPS = 50
	}
	if o.Burst <= 0 {
		o.Burst = 100
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.LeaseName == "" {
		o.LeaseName = "slipway-eds-controller"
	}
	if o.LeaderElect && o.LeaseNamespace == "" {
		return o, errors.New("eds: --leader-elect needs --lease-namespace (the namespace the controller runs in)")
	}
	if o.Identity == "" {
		host, _ := os.Hostname()
		o.Identity = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	return o, nil
}
