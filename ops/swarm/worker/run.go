package worker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/swarm/config"
)

// Run runs the worker until ctx ends (or, with Exec, until the command exits
// by itself: its error is returned).
func Run(ctx context.Context, opts Options) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	w := &worker{opts: opts, log: opts.Log.With("pod", opts.PodName), applied: -1, reported: -1}
	if opts.Config != nil {
		if w.kube, err = kube.NewForConfig(opts.Config); err != nil {
			return fmt.Errorf("build the Kubernetes client: %w", err)
		}
	}
	return w.loop(ctx)
}

type worker struct {
	opts              Options
	log               *slog.Logger
	kube              *kube.Clientset
	applied, reported int64
	jobs              []string
	child             *exec.Cmd
	exited            chan error
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
		if err := w.step(ctx); err != nil {
			w.log.Warn("cannot apply the share", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-w.exited:
			// Waited for: the deferred stopChild has nothing left to stop.
			w.child, w.exited = nil, nil
			if ctx.Err() != nil {
				return nil // stopped with ctx (CommandContext's SIGTERM), not by itself
			}
			return fmt.Errorf("the command exited: %w", err)
		case <-events:
			sleep(ctx, 50*time.Millisecond) // let the swap finish
		case <-time.After(w.opts.Poll):
		}
	}
}

// step applies the share when it changed, and reports the version applied
// until the report succeeds. A share that was applied and is gone from the
// config is dropped (no jobs), whatever Once says: its jobs now run
// elsewhere, and must not run twice.
func (w *worker) step(ctx context.Context) error {
	s, found, removed, err := share(w.opts.ConfigFile, w.opts.PodName)
	if err != nil {
		return err
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
	same := w.applied == s.Version && config.SameJobs(s.Jobs, w.jobs)
	holding := w.applied >= 0 && len(w.jobs) > 0 // Once keeps a share it holds, not an empty one
	if !same && !(holding && w.opts.Once) {
		if err := w.apply(ctx, s.Jobs, s.Version); err != nil {
			return err
		}
		w.applied, w.jobs = s.Version, s.Jobs
		w.log.Info("applied share", "version", s.Version, "jobs", len(s.Jobs))
	}
	if w.reported == w.applied {
		return nil
	}
	if err := w.report(ctx, w.applied); err != nil {
		return err
	}
	w.reported = w.applied
	return nil
}

// apply hands the jobs to the application.
func (w *worker) apply(ctx context.Context, jobs []string, version int64) error {
	if w.opts.Out != "" {
		if err := writeJobs(w.opts.Out, jobs); err != nil {
			return err
		}
	}
	if len(w.opts.Exec) == 0 {
		return nil
	}
	w.stopChild()
	cmd := exec.CommandContext(ctx, w.opts.Exec[0], append(w.opts.Exec[1:], jobs...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "SWARM_JOBS="+strings.Join(jobs, "\n"), "SWARM_VERSION="+strconv.FormatInt(version, 10))
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", w.opts.Exec[0], err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	w.child, w.exited = cmd, exited
	return nil
}

// stopChild ends the running command, if any, and waits for it.
func (w *worker) stopChild() {
	if w.child == nil {
		return
	}
	_ = w.child.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.exited:
	case <-time.After(10 * time.Second):
		_ = w.child.Process.Kill()
		<-w.exited
	}
	w.child, w.exited = nil, nil
}

// report annotates the pod with the version applied.
func (w *worker) report(ctx context.Context, version int64) error {
	if w.kube == nil {
		return nil
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, swarmv1.AppliedVersionAnnotation, strconv.FormatInt(version, 10))
	_, err := w.kube.CoreV1().Pods(w.opts.Namespace).Patch(ctx, w.opts.PodName, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("report version %d on pod %s: %w", version, w.opts.PodName, err)
	}
	return nil
}
