package agent

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/wallclock"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/upgrade/layout"
)

// A rollout that ends after its Job swapped the system directory but
// before the reboot (a drain that failed, a slot taken away, a channel
// deleted) leaves a swap staged for the node's next boot, which would start
// the new version with no drain, no window and no slot. The agent undoes
// such a swap with a rollback Job (`slipway ops rollback --reboot=false`,
// current and previous swapped back), so the next boot starts what runs.

// AnnotationRollbackBoot is the boot ID a rollback Job's swap was staged
// on, AnnotationRollbackAttempt its attempt (1, 2, ...): the Jobs of one
// boot and staged version are the history its retries are decided from.
const (
	AnnotationRollbackBoot    = "ops.slipway.dev/rollback-boot-id"
	AnnotationRollbackAttempt = "ops.slipway.dev/rollback-attempt"
)

// rollbackTimeout bounds a rollback Job: it only swaps two links.
const rollbackTimeout = 10 * time.Minute

// undoPlan is what a rollback undoes, and why (or why not).
type undoPlan struct {
	Undo       bool
	Components []layout.Component
	Reason     string
}

// planUndo decides the rollback of a node whose rollout ended without its
// reboot: exactly the components whose `current` differs from what runs
// (a release that kept the kernel, a channel with components.kernel false,
// a staged k3s), each only if its `previous` names what runs, so that the
// rollback restores it; only a swap made by slipway's own upgrade Job
// (ourJob), never one an operator staged by hand.
func planUndo(running, current, previous Versions, ourJob bool) undoPlan {
	staged := plan.Staged(running, current)
	if staged == (Versions{}) {
		return undoPlan{Reason: "nothing staged: the next boot starts what runs"}
	}
	if !ourJob {
		return undoPlan{Reason: "the staged version " + orNone(current.Rootfs) + " was not staged by a slipway upgrade Job; left for the next boot"}
	}
	var comps []layout.Component
	for _, c := range layout.Components {
		if versionOf(staged, c) == "" {
			continue
		}
		if prev, run := versionOf(previous, c), versionOf(running, c); prev == "" || prev != run {
			return undoPlan{Reason: fmt.Sprintf("%s previous names %s, not the running %s: a rollback would not restore it", protocol.ComponentFlag[c], orNone(prev), orNone(run))}
		}
		comps = append(comps, c)
	}
	return undoPlan{Undo: true, Components: comps, Reason: fmt.Sprintf("the next boot would start %s without a drain", describe(staged))}
}

func versionOf(v Versions, c layout.Component) string {
	switch c {
	case layout.Rootfs:
		return v.Rootfs
	case layout.Kernel:
		return v.Kernel
	case layout.K3s:
		return v.K3s
	}
	return ""
}

// describe names the staged components: "rootfs v2, k3s v2-k3s1".
func describe(staged Versions) string {
	var parts []string
	for _, c := range layout.Components {
		if v := versionOf(staged, c); v != "" {
			parts = append(parts, protocol.ComponentFlag[c]+" "+v)
		}
	}
	return strings.Join(parts, ", ")
}

func componentList(cs []layout.Component) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = protocol.ComponentFlag[c]
	}
	return strings.Join(names, " and ")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// idle is what a node's agent does for channel ch (nil: deleted) when it
// holds no slot in it: undo a swap its rollout left staged and undo
// slipway's cordon (cleanupIdle).
func (a *Agent) idle(ctx context.Context, ch *v1.UpdateChannel) error {
	if err := a.undoSwap(ctx, ch); err != nil {
		return err
	}
	return a.cleanupIdle(ctx)
}

// undoSwap starts a rollback Job when planUndo says the swap staged in the
// system directory is one of slipway's Jobs' and no channel holds a slot
// for this node any more (asked of the API server, not the cache). The
// Job rolls back exactly the components whose current differs from what
// runs. A failed rollback Job is reported (Event RollbackFailed, metric)
// and retried after the agent's retry backoff, under a new name.
func (a *Agent) undoSwap(ctx context.Context, ch *v1.UpdateChannel) error {
	// The Jobs are read before the system directory: a Job seen finished
	// here has its swap on disk already. Read the other way round, a
	// rollback finishing between the two reads looks like a swap still to
	// undo, and a second rollback Job swaps it back in.
	if running, current := a.readableVersions(), a.currentVersions(); running != nil && current != nil && plan.Staged(*running, *current) != (Versions{}) {
		ready, release := a.holdWork() // the Jobs that made the swap, and the rollback's
		if !ready {
			return nil // their first fill queues every channel again
		}
		defer release()
	}
	jobs := a.nodeJobs()
	running, current := a.readableVersions(), a.currentVersions()
	if running == nil || current == nil {
		return nil
	}
	if plan.Staged(*running, *current) == (Versions{}) {
		if a.takeRolledBack() { // this process's rollback Job is done: nothing staged any more
			return a.republish(ctx)
		}
		return nil
	}
	ourJob, busy := upgradeJobAt(jobs, current.Rootfs)
	if rbOurs, rbBusy := backoutJobAt(jobs, current.Rootfs); rbOurs || rbBusy { // a rollback slot's swap (backout.go)
		ourJob, busy = ourJob || rbOurs, busy || rbBusy
	}
	if busy {
		return nil // the Job informer calls again when it finishes
	}
	d := planUndo(*running, *current, a.previousVersions(), ourJob)
	if !d.Undo {
		a.log.Debug("staged swap left in place", "staged", current.Rootfs, "why", d.Reason)
		return nil
	}
	if held, err := a.holdsAnySlot(ctx); err != nil || held {
		return err
	}
	boot := a.knownBootID()
	h := rollbackHistoryOf(rollbackJobs(jobs, current.Rootfs, boot))
	if h.running {
		return nil // the Job informer calls again when it finishes
	}
	a.reportRollbackFailures(ch, h)
	if wait := h.wait(a.opts.Retry, wallclock.Now()); wait > 0 {
		a.queue.AddAfter(key{roleNode, channelName(ch)}, wait)
		return nil
	}
	name := rollbackJobName(a.opts.NodeName, current.Rootfs, boot, h.next)
	if a.job(name) != nil {
		return nil // made already: its cache entry tells the rest
	}
	err := a.createJob(ctx, ch, a.buildRollbackJob(ch, name, *current, boot, h.next, d.Components)) // AlreadyExists only for this very Job
	if apierrors.IsAlreadyExists(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("create rollback job %s: %w", name, err)
	}
	a.metrics.rollbacks.Inc()
	a.setRolledBack()
	a.log.Info("rolling back a swap not booted", "job", name, "components", d.Components, "staged", current.Rootfs, "running", running.Rootfs)
	a.recorder.Eventf(a.eventTarget(ch), corev1.EventTypeWarning, "RollingBack",
		"node %s: its rollout ended before the reboot and %s; job %s rolls %s back to %s",
		a.opts.NodeName, d.Reason, name, componentList(d.Components), running.Rootfs)
	return nil
}

// nodeJob is one of this node's Jobs as the caches show it at one moment:
// the Job, and whether its pod already succeeded (before the Job
// controller says so).
type nodeJob struct {
	job          *batchv1.Job
	podSucceeded bool
}

// nodeJobs reads this node's Jobs and their pods' outcome, once.
func (a *Agent) nodeJobs() []nodeJob {
	var out []nodeJob
	for _, o := range a.jobCache().List() {
		if j, ok := o.(*batchv1.Job); ok && j.Annotations[protocol.AnnotationJobNode] == a.opts.NodeName {
			out = append(out, nodeJob{job: j, podSucceeded: a.podSucceeded(j)})
		}
	}
	return out
}

// upgradeJobAt reports whether an upgrade Job of this node to version
// exists and has finished (ours), or still runs (busy).
func upgradeJobAt(jobs []nodeJob, version string) (ours, busy bool) {
	for _, nj := range jobs {
		j := nj.job
		if j.Annotations[protocol.AnnotationJobAction] != "" {
			continue
		}
		if v := j.Annotations[protocol.AnnotationJobVersion]; v != version && (v != "" || protocol.JobArg(j, "--version") != version) {
			continue
		}
		if done, _, _, _ := protocol.JobOutcome(j); done || nj.podSucceeded {
			ours = true
		} else {
			busy = true
		}
	}
	return ours, busy
}

// buildRollbackJob is the upgrade Job's pod running `ops rollback` of
// components instead: the same node binding, mounts and capabilities.
func (a *Agent) buildRollbackJob(ch *v1.UpdateChannel, name string, staged Versions, boot string, attempt int, components []layout.Component) *batchv1.Job {
	s := plan.Settings{UpgradeTimeout: rollbackTimeout}
	if ch == nil {
		ch = &v1.UpdateChannel{}
	} else {
		s = mustResolve(ch)
		s.UpgradeTimeout = rollbackTimeout
	}
	j := a.buildJob(ch, s, v1.Slot{Node: a.opts.NodeName, Version: staged.Rootfs})
	j.Name = name
	for _, m := range []map[string]string{j.Annotations, j.Spec.Template.Annotations} {
		m[protocol.AnnotationJobAction] = protocol.JobActionRollback
		m[AnnotationRollbackBoot] = boot
		m[AnnotationRollbackAttempt] = strconv.Itoa(attempt)
	}
	c := &j.Spec.Template.Spec.Containers[0]
	c.Name, c.Args = "rollback", rollbackArgs(c.Args, components, staged)
	return j
}

// rollbackArgs turns the upgrade Job's arguments into `ops rollback` of
// exactly components, with the same system directory, lock and mount
// handling, each from its staged version (`--from`: a pod started twice
// does not swap the links back again).
func rollbackArgs(upgrade []string, components []layout.Component, staged Versions) []string {
	args := []string{"ops", "rollback", "--reboot=false"}
	for _, flag := range []string{"--system-dir", "--lock-file"} {
		if v := protocol.ArgAfterFlag(upgrade, flag); v != "" {
			args = append(args, flag, v)
		}
	}
	for _, a := range upgrade {
		if a == "--remount" {
			args = append(args, a)
		}
	}
	for _, c := range layout.Components {
		args = append(args, fmt.Sprintf("--%s=%t", protocol.ComponentFlag[c], slices.Contains(components, c)))
	}
	for _, c := range components {
		args = append(args, "--from", protocol.ComponentFlag[c]+"="+versionOf(staged, c))
	}
	return args
}

func (a *Agent) setRolledBack() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rolledBack = true
}

// takeRolledBack reports, once, that this process created a rollback Job.
func (a *Agent) takeRolledBack() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	was := a.rolledBack
	a.rolledBack = false
	return was
}

func (a *Agent) knownBootID() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.knownBoot
}

// eventTarget is ch, or this node's NodeUpdate when the channel is gone
// (in slipway's namespace, where the agent writes its Events: the API
// admits an Event about a Node only in "default").
func (a *Agent) eventTarget(ch *v1.UpdateChannel) runtime.Object {
	if ch != nil && ch.Name != "" {
		return ch
	}
	if u := a.ownObject(); u != nil {
		return u
	}
	return &v1.NodeUpdate{TypeMeta: metav1.TypeMeta{APIVersion: v1.SchemeGroupVersion.String(), Kind: "NodeUpdate"},
		ObjectMeta: metav1.ObjectMeta{Name: protocol.NodeUpdateName(a.opts.NodeName), Namespace: a.opts.Namespace}}
}
