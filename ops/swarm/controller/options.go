package controller

import (
	"errors"
	"log/slog"
	"os"
	"time"

	"k8s.io/client-go/rest"
)

// Options configure a controller.
type Options struct {
	// Config reaches the API server.
	Config *rest.Config
	// Namespace holds the Swarms, their workloads and ConfigMaps, and the
	// Lease; the controller reads nothing outside it.
	Namespace string
	// Identity is this replica's name in the Lease (default: the host name).
	Identity string
	// HTTPAddr serves /assignments, /metrics, /healthz and /readyz ("" = off).
	HTTPAddr string
	// LeaseName is the Lease the replicas compete for.
	LeaseName string
	// LeaseDuration is how long a dead leader keeps the Lease.
	LeaseDuration time.Duration
	// Resync re-reads every Swarm at least this often.
	Resync time.Duration
	// SettleTimeout is the longest a reassignment waits for the workloads to
	// reach their desired number of Ready pods.
	SettleTimeout time.Duration
	// RestartTimeout is how long a restarted worker keeps its share while
	// its pod is away.
	RestartTimeout time.Duration
	// StallAfter is how long the work loop may go without a turn before
	// /healthz fails (the loop turns at least every few seconds, idle or
	// not, leader or not).
	StallAfter time.Duration
	Log        *slog.Logger
}

// Defaults are the options' defaults.
func Defaults() Options {
	return Options{
		LeaseName: "slipway-swarm-controller", LeaseDuration: 15 * time.Second, Resync: 5 * time.Minute,
		SettleTimeout: time.Minute, RestartTimeout: 5 * time.Minute, HTTPAddr: ":9480", StallAfter: 3 * time.Minute,
	}
}

func (o Options) withDefaults() (Options, error) {
	d := Defaults()
	if o.Config == nil {
		return o, errors.New("swarm controller: no API server configuration: pass --kubeconfig or run in a cluster")
	}
	if o.Namespace == "" {
		return o, errors.New("swarm controller: --namespace is required")
	}
	if o.Identity == "" {
		host, err := os.Hostname()
		if err != nil {
			return o, errors.New("swarm controller: no --identity and no host name")
		}
		o.Identity = host
	}
	if o.LeaseName == "" {
		o.LeaseName = d.LeaseName
	}
	for _, f := range []struct{ v, d *time.Duration }{
		{&o.LeaseDuration, &d.LeaseDuration}, {&o.Resync, &d.Resync},
		{&o.SettleTimeout, &d.SettleTimeout}, {&o.RestartTimeout, &d.RestartTimeout}, {&o.StallAfter, &d.StallAfter},
	} {
		if *f.v <= 0 {
			*f.v = *f.d
		}
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return o, nil
}
