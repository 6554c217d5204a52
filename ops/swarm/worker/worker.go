// Package worker is `slipway swarm worker`, which runs beside the
// application in a worker pod (as a sidecar or as its wrapper): it reads its
// own share of the mounted workers' ConfigMap (by POD_NAME), watches the
// file, hands the jobs to the application (a file it reads, --out, or the
// arguments of a command it runs, --exec), and reports the version it
// applied in its pod's annotation, by which the controller knows it
// converged.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/swarm/config"
)

// Options configure a worker.
type Options struct {
	// ConfigFile is the mounted config.yml of the workers' ConfigMap.
	ConfigFile string
	// PodName is this worker's pod (the key of its share).
	PodName string
	// Namespace is the pod's namespace.
	Namespace string
	// Out, when set, is the file the jobs are written to, one per line
	// (replaced atomically).
	Out string
	// Exec, when set, is the command run with the jobs as its last
	// arguments (and in SWARM_JOBS, one per line); it is restarted when
	// the share changes, and its exit ends the worker with its status.
	Exec []string
	// Once applies the first share and then keeps it (refresh: restart,
	// where the controller restarts the pod on a change).
	Once bool
	// Config reaches the API server to annotate the pod and hold the
	// worker's Lease; nil skips both (jobs then run unfenced).
	Config *rest.Config
	// LeaseDuration is how long the worker's Lease lasts unrenewed
	// (default member.DefaultDuration); the worker stops its jobs after two
	// thirds of it without a renewal.
	LeaseDuration time.Duration
	// Poll is how often the file is read besides change notifications.
	Poll time.Duration
	// HTTPAddr serves /healthz and /readyz ("" = off).
	HTTPAddr string
	// StallAfter is how long the loop may go without a turn before /healthz
	// fails (default the larger of a minute and three Polls; the loop turns
	// at least every Poll).
	StallAfter time.Duration
	Log        *slog.Logger

	// listening, when set, is told the address the probes are served on.
	listening func(addr string)
}

// Check reports what is missing from o, before anything starts.
func (o Options) Check() error {
	_, err := o.withDefaults()
	return err
}

func (o Options) withDefaults() (Options, error) {
	if o.PodName == "" {
		return o, errors.New("swarm worker: no pod name: set POD_NAME from the downward API (fieldRef metadata.name) or pass --pod-name")
	}
	if o.ConfigFile == "" {
		return o, errors.New("swarm worker: --config is required: the mounted config.yml of the workers' ConfigMap")
	}
	if o.Out == "" && len(o.Exec) == 0 {
		return o, errors.New("swarm worker: pass --out FILE or --exec CMD: where the jobs go")
	}
	if o.Config != nil && o.Namespace == "" {
		return o, errors.New("swarm worker: no namespace: set POD_NAMESPACE from the downward API or pass --namespace")
	}
	if o.Poll <= 0 {
		o.Poll = 10 * time.Second
	}
	if o.StallAfter <= 0 {
		o.StallAfter = max(time.Minute, 3*o.Poll)
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return o, nil
}

// share reads the config file and returns this pod's share. found is false
// while the share does not exist; removed is true when the file is there
// and lists no share for the pod (its jobs went to other workers).
func share(path, pod string) (w config.Workload, version int64, found, removed bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return config.Workload{}, 0, false, false, nil
	}
	if err != nil {
		return config.Workload{}, 0, false, false, fmt.Errorf("read %s: %w", path, err)
	}
	cfg, err := config.Parse(string(b))
	if err != nil {
		return config.Workload{}, 0, false, false, err
	}
	w, found = cfg.Workloads[pod]
	return w, cfg.Version, found, !found, nil
}

// writeJobs replaces path with the jobs, one per line, atomically.
func writeJobs(path string, jobs []string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".jobs-*")
	if err != nil {
		return fmt.Errorf("write the jobs file: %w", err)
	}
	body := strings.Join(jobs, "\n")
	if len(jobs) > 0 {
		body += "\n"
	}
	if _, err := tmp.WriteString(body); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("write the jobs file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write the jobs file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	return nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
