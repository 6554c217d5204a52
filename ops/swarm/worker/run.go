package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/health"
	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/lease"
	"slipway.dev/slipway/ops/swarm/config"
	"slipway.dev/slipway/ops/swarm/jobsfile"
	"slipway.dev/slipway/ops/swarm/member"
)

// Run runs the worker until ctx ends (or, with Exec, until the command exits
// by itself: its error is returned).
func Run(ctx context.Context, opts Options) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	w := &worker{opts: opts, log: opts.Log.With("pod", opts.PodName), applied: -1, reported: -1, stopGrace: 10 * time.Second}
	if opts.Config != nil {
		w.tenure = &lease.Tenure{}
		if w.kube, err = kube.NewForConfig(opts.Config); err != nil {
			return fmt.Errorf("build the Kubernetes client: %w", err)
		}
	}
	w.newProbe()
	pctx, stopProbes := context.WithCancel(ctx)
	defer stopProbes()
	if err := w.serveProbes(pctx); err != nil {
		return err
	}
	if opts.Config == nil {
		return w.loop(ctx)
	}
	return w.member(ctx)
}

// member runs the loop as a member of the Swarm: jobs run only while the
// worker's Lease tenure lasts. On the way out the jobs stop first, then the
// Lease is released (its jobs may move at once).
func (w *worker) member(ctx context.Context) error {
	t := member.TimingOf(w.opts.LeaseDuration)
	w.wake, w.stopGrace, w.retry = make(chan struct{}, 1), t.StopGrace, t.Retry
	wake := func() {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	started := func() { w.revalidate.Store(true); wake() }
	if _, err := os.Stat(w.opts.Out); err == nil {
		w.stopJobs() // a previous worker's jobs file is not this tenure's
		w.gave = true
	}
	leases := &abandonable{Client: w.kube.CoordinationV1().Leases(w.opts.Namespace), seen: func(l *coordinationv1.Lease) {
		if w.fence(l) {
			wake()
		}
	}}
	lctx, stopLease := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() {
		done <- lease.Run(lctx, lease.Config{
			Client: leases, Name: member.LeaseName(w.opts.PodName), Identity: w.identity(),
			Duration: t.Duration, RenewDeadline: t.RenewDeadline, RetryPeriod: t.Retry, Tenure: w.tenure,
			OnStartedLeading: started, OnStoppedLeading: wake, Log: w.log,
		})
	}()
	err := w.loop(ctx)
	w.stopJobs()
	if w.gave && !w.waitAck(0, w.opts.AckTimeout) {
		// Releasing the Lease would let the controller hand the jobs out
		// while the application may still run them: let it lapse instead.
		w.log.Warn("the application did not acknowledge that it stopped its jobs: exiting without releasing the Lease (its jobs move once it lapses)", "waited", w.opts.AckTimeout, "ack", w.opts.Ack)
		leases.abandoned.Store(true)
	}
	stopLease()
	if lerr := <-done; lerr != nil && err == nil {
		err = fmt.Errorf("hold the worker's Lease: %w", lerr)
	}
	return err
}

// identity is the worker's name as its Lease's holder: its pod's UID (one
// identity per pod incarnation), or its name when the UID is not given.
func (w *worker) identity() string {
	if w.opts.PodUID != "" {
		return w.opts.PodUID
	}
	w.log.Warn("no pod UID (set POD_UID from the downward API, fieldRef metadata.uid): the Lease is held under the pod's name, so a replacement pod of the same name could take it over while this one still runs")
	return w.opts.PodName
}

// fence raises minVersion to l's fence, telling whether it rose.
func (w *worker) fence(l *coordinationv1.Lease) bool {
	v := member.MinVersion(l)
	for {
		old := w.minVersion.Load()
		if v <= old {
			return false
		}
		if w.minVersion.CompareAndSwap(old, v) {
			return true
		}
	}
}

// abandonable is the worker's Lease client, which writes nothing once
// abandoned: the Lease is then left to lapse, not released. Every Lease
// it reads or writes is shown to seen: each renewal carries the
// controller's fence (member.MinVersionAnnotation) at no extra request.
type abandonable struct {
	lease.Client
	abandoned atomic.Bool
	seen      func(*coordinationv1.Lease)
}

func (a *abandonable) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	l, err := a.Client.Get(ctx, name, opts)
	if err == nil && a.seen != nil {
		a.seen(l)
	}
	return l, err
}

var errAbandoned = errors.New("the Lease is abandoned: it lapses, unreleased")

func (a *abandonable) Create(ctx context.Context, l *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	if a.abandoned.Load() {
		return nil, errAbandoned
	}
	return a.Client.Create(ctx, l, opts)
}

func (a *abandonable) Update(ctx context.Context, l *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if a.abandoned.Load() {
		return nil, errAbandoned
	}
	l, err := a.Client.Update(ctx, l, opts)
	if err == nil && a.seen != nil {
		a.seen(l)
	}
	return l, err
}

// acked tells whether the application acknowledged that it runs no job
// outside the jobs file of version (always, without --ack).
func (w *worker) acked(version int64) bool {
	if w.opts.Ack == "" {
		return true
	}
	n, ok := jobsfile.ReadAck(w.opts.Ack)
	return ok && jobsfile.Confirms(n, version)
}

// waitAck waits up to d for the application to acknowledge version.
func (w *worker) waitAck(version int64, d time.Duration) bool {
	for deadline := time.Now().Add(d); !w.acked(version); time.Sleep(ackPoll) {
		if !time.Now().Before(deadline) {
			return false
		}
	}
	return true
}

// ackPoll is how often the acknowledgement file is read while awaited.
const ackPoll = 50 * time.Millisecond

// ackTimer fires while a share applied awaits the application's
// acknowledgement before it is reported.
func (w *worker) ackTimer() <-chan time.Time {
	if w.opts.Ack == "" || w.applied < 0 || w.reported == w.applied {
		return nil
	}
	return time.After(ackPoll)
}

// renewTimer fires every renewal period while a jobs file with a deadline
// is in force, to write the deadline the last renewal set.
func (w *worker) renewTimer() <-chan time.Time {
	if w.tenure == nil || w.opts.Out == "" || w.applied < 0 || w.retry <= 0 {
		return nil
	}
	return time.After(w.retry)
}

// validUntil is the deadline of the jobs running now: the tenure's end
// (zero without a Lease).
func (w *worker) validUntil() time.Time {
	if w.tenure == nil {
		return time.Time{}
	}
	return w.tenure.Until()
}

// fenced tells whether the worker may not run jobs now: it has a Lease and
// its tenure ended (or never began).
func (w *worker) fenced() bool {
	return w.tenure != nil && !time.Now().Before(w.tenure.Until())
}

// stopJobs stops whatever runs: an empty jobs file, no command.
func (w *worker) stopJobs() {
	if w.opts.Out != "" {
		if err := writeJobs(w.opts.Out, 0, time.Time{}, nil); err != nil {
			w.log.Warn("cannot empty the jobs file", "err", err)
		}
	}
	w.stopChild()
	w.jobs, w.applied = nil, -1
}

type worker struct {
	opts              Options
	log               *slog.Logger
	kube              *kube.Clientset
	applied, reported int64
	// highest is the highest share version applied: a lower one is refused.
	highest int64
	jobs    []string
	child   *exec.Cmd
	exited  chan error
	// gave is set once a jobs file was written by this worker or found
	// from a previous one: on the way out the application's stop is
	// awaited.
	gave bool
	// written is the validity deadline in the jobs file; retry is how
	// often the Lease is renewed (the file's deadline refreshed).
	written time.Time
	retry   time.Duration
	// tenure is the worker's Lease tenure (nil without one); wake is
	// signalled when the Lease is taken or lost.
	tenure    *lease.Tenure
	wake      chan struct{}
	stopGrace time.Duration
	// revalidate is set when the Lease is (re)taken: minVersion is then
	// read from it again before any share runs. minVersion also follows
	// every read and renewal of the Lease (the fence is checked on each).
	revalidate atomic.Bool
	minVersion atomic.Int64
	// probe serves /healthz (beat: the loop turns) and /readyz
	// (configRead, unreported and the tenure).
	probe      *health.Probe
	beat       func()
	configRead atomic.Bool
	unreported atomic.Bool
}

// loop reads the share at start, on every change of the file's directory
// (a mounted ConfigMap is replaced through a symlink swap) and every Poll.
func (w *worker) loop(ctx context.Context) error {
	notify, err := fsnotify.NewWatcher()
	if err == nil {
		defer notify.Close()
		if err := notify.Add(filepath.Dir(w.opts.ConfigFile)); err != nil {
			w.log.Warn("cannot watch the config's directory; polling only", "err", err)
		}
	}
	var events <-chan fsnotify.Event
	if notify != nil {
		events = notify.Events
	}
	defer w.stopChild()
	for {
		w.beat()
		if err := w.step(ctx); err != nil {
			w.log.Warn("cannot apply the share", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-w.exited:
			// Waited for: the deferred stopChild has nothing left to stop
			// but what the command left behind in its group.
			_ = signalGroup(w.child, syscall.SIGKILL)
			w.child, w.exited = nil, nil
			if ctx.Err() != nil {
				return nil // stopped with ctx (CommandContext's SIGTERM), not by itself
			}
			return fmt.Errorf("the command exited: %w", err)
		case <-events:
			sleep(ctx, 50*time.Millisecond) // let the swap finish
		case <-w.wake:
		case <-w.fenceTimer():
		case <-w.ackTimer():
		case <-w.renewTimer():
		case <-time.After(w.opts.Poll):
		}
	}
}

// step applies the share when it changed, and reports the version applied
// until the report succeeds. A share that was applied and is gone from the
// config is dropped (no jobs), whatever Once says: its jobs now run
// elsewhere, and must not run twice.
func (w *worker) step(ctx context.Context) error {
	if w.fenced() {
		if w.applied >= 0 || w.child != nil {
			w.stopJobs()
			w.log.Warn("the worker's Lease was not renewed in time: jobs stopped until it is (the controller may give them to other workers)")
		}
		return nil
	}
	if err := w.readMinVersion(ctx); err != nil {
		return err
	}
	s, version, found, removed, err := share(w.opts.ConfigFile, w.opts.PodName)
	if err != nil {
		return err
	}
	w.configRead.Store(found || removed)
	if min := w.minVersion.Load(); version < min {
		if w.applied >= 0 || w.child != nil {
			// The controller gave this share's jobs (some of them at least)
			// to others from version min on: the stale mount must not run.
			w.stopJobs()
			w.log.Warn("the mounted config is older than the Lease's fence: jobs stopped until it catches up", "version", version, "min", min)
			return nil
		}
		w.log.Info("the mounted config is older than the Lease allows; waiting for it to catch up", "version", version, "min", min)
		return nil
	}
	if removed && w.applied >= 0 && len(w.jobs) > 0 {
		if err := w.apply(ctx, nil, 0); err != nil {
			return err
		}
		w.jobs = nil
		w.log.Info("share removed: jobs dropped")
		return nil
	}
	if !found {
		return nil
	}
	if s.Version < w.highest {
		// A share older than one already applied: a mount gone backwards
		// (a stale volume, a hand-restored file) must not bring back jobs
		// handed out since.
		w.log.Warn("refusing a share older than one already applied", "version", s.Version, "highest", w.highest)
		return nil
	}
	same := w.applied == s.Version && config.SameJobs(s.Jobs, w.jobs)
	holding := w.applied >= 0 && len(w.jobs) > 0 // Once keeps a share it holds, not an empty one
	if !same && !(holding && w.opts.Once) {
		if err := w.apply(ctx, s.Jobs, s.Version); err != nil {
			return err
		}
		w.applied, w.jobs, w.highest = s.Version, s.Jobs, max(w.highest, s.Version)
		w.log.Info("applied share", "version", s.Version, "jobs", len(s.Jobs))
	} else if w.opts.Out != "" && w.applied >= 0 && !w.validUntil().Equal(w.written) {
		// Renewed: the application may run the jobs until the new deadline.
		if err := w.writeOut(w.applied, w.jobs); err != nil {
			return err
		}
	}
	if !w.acked(w.applied) {
		// The application still runs jobs the share took away: no report
		// yet, and no failing one either (readiness stays as it was).
		return nil
	}
	w.unreported.Store(w.reported != w.applied)
	if w.reported == w.applied {
		return nil
	}
	if err := w.report(ctx, w.applied); err != nil {
		return err
	}
	w.reported = w.applied
	w.unreported.Store(false)
	return nil
}

// readMinVersion reads, once the Lease was (re)taken, the oldest config
// version the worker may run (member.MinVersionAnnotation).
func (w *worker) readMinVersion(ctx context.Context) error {
	if !w.revalidate.Load() {
		return nil
	}
	ctx, cancel := w.tenure.Fence(ctx) // see report
	defer cancel()
	l, err := w.kube.CoordinationV1().Leases(w.opts.Namespace).Get(ctx, member.LeaseName(w.opts.PodName), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read the worker's Lease: %w", err)
	}
	w.fence(l)
	w.revalidate.Store(false)
	return nil
}

// fenceTimer fires when the tenure ends, while jobs run under it.
func (w *worker) fenceTimer() <-chan time.Time {
	if w.tenure == nil || w.applied < 0 {
		return nil
	}
	return time.After(max(time.Until(w.tenure.Until()), 0))
}

// apply hands the jobs to the application.
func (w *worker) apply(ctx context.Context, jobs []string, version int64) error {
	if w.opts.Out != "" {
		if err := w.writeOut(version, jobs); err != nil {
			return err
		}
		w.gave = w.gave || len(jobs) > 0
	}
	if len(w.opts.Exec) == 0 {
		return nil
	}
	w.stopChild()
	cmd := exec.CommandContext(ctx, w.opts.Exec[0], append(w.opts.Exec[1:], jobs...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "SWARM_JOBS="+strings.Join(jobs, "\n"), "SWARM_VERSION="+strconv.FormatInt(version, 10))
	if until := w.validUntil(); !until.IsZero() {
		cmd.Env = append(cmd.Env, "SWARM_VALID_UNTIL="+until.UTC().Format(time.RFC3339Nano))
	}
	if w.opts.Out != "" {
		cmd.Env = append(cmd.Env, "SWARM_JOBS_FILE="+w.opts.Out)
	}
	// The command leads a process group of its own: stopping it stops
	// whatever it started too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return signalGroup(cmd, syscall.SIGTERM) }
	cmd.WaitDelay = w.stopGrace
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", w.opts.Exec[0], err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	w.child, w.exited = cmd, exited
	return nil
}

// writeOut writes the jobs file with the deadline in force.
func (w *worker) writeOut(version int64, jobs []string) error {
	until := w.validUntil()
	if err := writeJobs(w.opts.Out, version, until, jobs); err != nil {
		return err
	}
	w.written = until
	return nil
}

// stopChild ends the running command and every process of its group, if
// any, and waits for it.
func (w *worker) stopChild() {
	if w.child == nil {
		return
	}
	_ = signalGroup(w.child, syscall.SIGTERM)
	select {
	case <-w.exited:
	case <-time.After(w.stopGrace):
		_ = signalGroup(w.child, syscall.SIGKILL)
		<-w.exited
	}
	// What the command started and left behind goes too.
	_ = signalGroup(w.child, syscall.SIGKILL)
	w.child, w.exited = nil, nil
}

// signalGroup sends sig to cmd's process group (it leads one).
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) error {
	if cmd.Process == nil {
		return nil
	}
	return syscall.Kill(-cmd.Process.Pid, sig)
}

// report annotates the pod with the version applied. The call ends with the
// tenure: one that would outlast it (a partition that drops packets leaves
// it hanging) is abandoned, so that the loop is free to stop the jobs when
// the tenure ends, before the controller may give them away.
func (w *worker) report(ctx context.Context, version int64) error {
	if w.kube == nil {
		return nil
	}
	ctx, cancel := w.tenure.Fence(ctx)
	defer cancel()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, swarmv1.AppliedVersionAnnotation, strconv.FormatInt(version, 10))
	_, err := w.kube.CoreV1().Pods(w.opts.Namespace).Patch(ctx, w.opts.PodName, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("report version %d on pod %s: %w", version, w.opts.PodName, err)
	}
	return nil
}
