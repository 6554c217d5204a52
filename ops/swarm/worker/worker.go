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
	"time"

	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/swarm/config"
	"slipway.dev/slipway/ops/swarm/jobsfile"
)

// Options configure a worker.
type Options struct {
	// ConfigFile is the mounted config.yml of the workers' ConfigMap.
	ConfigFile string
	// PodName is this worker's pod (the key of its share).
	PodName string
	// PodUID is this worker's pod's UID: its identity as the holder of its
	// Lease, so that a pod replaced under the same name (a StatefulSet pod
	// force-deleted while its worker still runs) cannot take over the
	// Lease of the incarnation before it, but waits for it to be released
	// or to lapse. Empty: the pod name (one identity for every incarnation).
	PodUID string
	// Namespace is the pod's namespace.
	Namespace string
	// Out, when set, is the file the jobs are written to, one per line
	// after a `# swarm-version: N` header (replaced atomically; package
	// jobsfile).
	Out string
	// Ack, with Out, is the application's acknowledgement file (package
	// jobsfile): the worker confirms a share to the controller, and
	// releases its Lease on the way out, only once the application wrote
	// that it runs no job outside it. Without it the worker's own file
	// write counts as the application's stop.
	Ack string
	// AckTimeout is the longest wait on the way out for the application
	// to acknowledge that it stopped (default DefaultAckTimeout); past it
	// the worker exits without releasing its Lease, which then lapses.
	AckTimeout time.Duration
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
	if o.Ack != "" && o.Out == "" {
		return o, errors.New("swarm worker: --ack needs --out: the application acknowledges the jobs file it reads (with --exec the worker sees the command stop itself)")
	}
	if o.AckTimeout <= 0 {
		o.AckTimeout = DefaultAckTimeout
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

// DefaultAckTimeout is how long a stopping worker waits for its
// application's acknowledgement by default: a pod's default grace period.
const DefaultAckTimeout = 30 * time.Second

// writeJobs replaces path with the jobs of the share version (0: none
// runs), valid until the deadline (zero: none), atomically.
func writeJobs(path string, version int64, until time.Time, jobs []string) error {
	return jobsfile.Write(path, jobsfile.File{Version: version, ValidUntil: until, Jobs: jobs}.Render())
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
