package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/agent/plan"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
)

// syncNode drives this agent's own slot in channel name, one step per call.
// What a later step needs is in the API before the step that needs it (the
// slot's phase, the Job, the cordon and boot ID on the Node), so a restarted
// agent carries on where the last one stopped.
func (a *Agent) syncNode(ctx context.Context, name string) (time.Duration, error) {
	ch, err := a.channels.UpdateChannels(a.opts.Namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return 0, a.idle(ctx, nil)
	} else if err != nil {
		return 0, err
	}
	seen, _ := a.mySlot(ch, v1.Slot{})
	if seen == nil {
		a.noteWaiting(ch)
		return 0, a.idle(ctx, ch)
	}
	newest := plan.Newest(*seen, a.lastWrote(name))
	slot := &newest
	a.noteSlot(name)
	s, bad := plan.Resolve(ch.Spec)
	if bad != nil {
		return 0, nil // the fleet view marks it Invalid; the slot times out if it stays so
	}
	switch slot.Phase {
	case plan.PhasePending, plan.PhaseUpgrading, "":
		err = a.runJob(ctx, ch, s, *slot)
	case plan.PhaseDraining:
		err = a.drainAndReboot(ctx, ch, s, *slot)
	case plan.PhaseRebooting, plan.PhaseWaitingReady:
		var after time.Duration
		if after, err = a.afterReboot(ctx, ch, s, *slot); err == nil {
			return after, nil
		}
	}
	if errors.Is(err, errSlotGone) {
		a.log.Info("slot was taken away meanwhile", "channel", name)
		return 0, a.idle(ctx, ch)
	}
	return 0, err
}

// runJob creates the upgrade Job, and moves on when it finished.
func (a *Agent) runJob(ctx context.Context, ch *v1.UpdateChannel, s plan.Settings, slot v1.Slot) error {
	name := SlotJobName(ch.UID, slot)
	j := a.job(name)
	if j != nil {
		if ok, why := jobOwnedBy(j, ch.UID, slot); !ok {
			return a.fail(ctx, ch, slot, "job", fmt.Sprintf("job %s belongs to another rollout (%s): delete it and the node is retried", name, why))
		}
	}
	if running := a.readableVersions(); j == nil && !a.cordonedBySlipway() && running != nil && running.Rootfs == slot.Version {
		// It runs the target already (booted it): nothing to do, no reboot.
		// A swap staged but not booted does not count: the Job runs, the
		// node drains and reboots.
		a.recorder.Eventf(ch, corev1.EventTypeNormal, "AlreadyUpToDate", "node %s already runs %s; slot freed", a.opts.NodeName, slot.Version)
		return a.succeed(ctx, ch, slot, *running)
	}
	if j == nil {
		created, err := a.kube.BatchV1().Jobs(a.opts.Namespace).Create(ctx, a.buildJob(ch, s, slot), metav1.CreateOptions{})
		switch {
		case apierrors.IsAlreadyExists(err):
		case err != nil:
			return fmt.Errorf("create upgrade job %s: %w", name, err)
		default:
			j = created
			a.log.Info("upgrade job created", "channel", ch.Name, "job", name, "version", slot.Version, "attempt", slot.Attempt)
			a.recorder.Eventf(ch, corev1.EventTypeNormal, "Upgrading", "node %s took a slot: job %s upgrades it to %s (attempt %d)", a.opts.NodeName, name, slot.Version, slot.Attempt)
		}
	}
	if slot.Phase != plan.PhaseUpgrading || slot.Job != name {
		var err error
		if ch, err = a.setPhase(ctx, ch, slot, plan.PhaseUpgrading, name); err != nil {
			return err
		}
	}
	if j == nil {
		return nil // the Job informer brings it
	}
	done, failed, reason, _ := jobOutcome(j)
	if !done && a.podSucceeded(j) {
		done = true // the Job controller marks it Complete about a second later
	}
	switch {
	case !done:
		return nil // the Job informer calls again when it finishes
	case failed:
		return a.fail(ctx, ch, slot, "job", fmt.Sprintf("upgrade job %s failed (%s)%s", name, reason, a.podMessage(ctx, name)))
	}
	slot.Job = name // Draining is written only if the drain is slow (drainAndReboot)
	return a.drainAndReboot(ctx, ch, s, slot)
}

// podMessage returns ": <the end of the failed pod's termination message>"
// of Job name, or a pointer to its log when there is none.
func (a *Agent) podMessage(ctx context.Context, job string) string {
	pods, err := a.kube.CoreV1().Pods(a.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err == nil {
		for _, p := range pods.Items {
			for _, cs := range p.Status.ContainerStatuses {
				if t := cs.State.Terminated; t != nil && strings.TrimSpace(t.Message) != "" {
					lines := strings.Split(strings.TrimSpace(t.Message), "\n")
					msg := strings.TrimSpace(lines[len(lines)-1]) // the error is the last line
					if len(msg) > 400 {
						msg = "..." + msg[len(msg)-400:]
					}
					return ": " + msg
				}
			}
		}
	}
	return "; its pod's log says why (kubectl -n " + a.opts.Namespace + " logs job/" + job + ")"
}

func (a *Agent) job(name string) *batchv1.Job {
	o, ok, _ := a.jobs.GetByKey(a.opts.Namespace + "/" + name)
	if !ok {
		return nil
	}
	j, _ := o.(*batchv1.Job)
	return j
}

// drainAndReboot cordons and drains the node (per spec.drain), then records
// the boot it reboots from, and reboots after rebootDelay.
func (a *Agent) drainAndReboot(ctx context.Context, ch *v1.UpdateChannel, s plan.Settings, slot v1.Slot) error {
	// The cached channel may still show a slot freed a moment ago (by this
	// agent's own failure, or by the fleet view): ask the API server.
	if err := a.confirmSlot(ctx, ch.Name, slot); err != nil {
		return err
	}
	if ok, why := a.drainAllowed(s); !ok {
		return a.deferToWindow(ctx, ch, slot, why)
	}
	boot, err := a.bootID()
	if err != nil {
		return err
	}
	rebootFrom := map[string]string{AnnotationRebootFrom: boot}
	if running, current := a.readableVersions(), a.currentVersions(); running != nil && current != nil {
		maps.Copy(rebootFrom, stagedAnnotations(*running, *current)) // what the reboot starts rides on the cordon
	}
	drained := "drain disabled"
	if s.Drain.Enabled {
		start := time.Now()
		opts, began, err := a.drainBudget(ctx, s.Drain.Options)
		if err != nil {
			return err
		}
		rebootFrom[AnnotationDrainStarted] = began.UTC().Format(time.RFC3339Nano)
		// The boot ID and the drain's start ride on the cordon's write.
		if err := drain.Cordon(ctx, a.kube, a.opts.NodeName, CordonOwner, rebootFrom); err != nil {
			return err
		}
		stop := a.markIfSlow(ctx, ch, slot, plan.PhaseDraining)
		res, err := drain.Drain(ctx, a.kube, a.opts.NodeName, withLog(opts, a.log))
		stop()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return a.fail(ctx, ch, slot, "drain", fmt.Sprintf("drain failed, node uncordoned: %v (drain began %s; drain.timeout %s counts from then)",
				err, began.UTC().Format(time.RFC3339), s.Drain.Timeout))
		}
		a.metrics.drain.Observe(time.Since(start).Seconds())
		drained = fmt.Sprintf("cordoned and drained in %s (%d pods evicted, %d deleted)",
			time.Since(start).Round(time.Millisecond), len(res.Evicted), len(res.Deleted))
	} else if err := a.patchNode(ctx, nil, anyMap(rebootFrom)); err != nil {
		return err
	}
	if _, err := a.setPhase(ctx, ch, slot, plan.PhaseRebooting, slot.Job); err != nil {
		return err
	}
	return a.reboot(ctx, ch, s, slot, drained)
}

// slowStep is how long a step may take before its phase is written to the
// slot: a quick drain costs no status write, a slow one shows in status.
const slowStep = 2 * time.Second

// markIfSlow writes phase to this node's slot once slowStep passed, unless
// the returned stop is called first; stop waits for a write in flight.
func (a *Agent) markIfSlow(ctx context.Context, ch *v1.UpdateChannel, slot v1.Slot, phase string) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		select {
		case <-done:
			return
		case <-time.After(slowStep):
		}
		if _, err := a.setPhase(ctx, ch, slot, phase, slot.Job); err != nil {
			a.log.Debug("could not record the slot's phase", "phase", phase, "err", err)
		}
	}()
	return func() { close(done); <-finished }
}

// reboot asks the Rebooter to reboot after rebootDelay, once per process,
// and again when the reboot stalled (still this boot RebootStall after the
// request; Event RebootStalled). how says what was done before (the
// drain), for the Rebooting Event; "" records no Event (an agent restarted
// before its reboot happened).
func (a *Agent) reboot(ctx context.Context, ch *v1.UpdateChannel, s plan.Settings, slot v1.Slot, how string) error {
	a.mu.Lock()
	already, announced, stalled := a.rebooting, a.rebootAnnounced, a.rebooting && time.Since(a.rebootAt) >= a.opts.RebootStall
	since := time.Since(a.rebootAt).Round(time.Second)
	if !already || stalled {
		a.rebooting, a.rebootAnnounced = true, true
	}
	a.mu.Unlock()
	if already && !stalled {
		return nil
	}
	delay := s.RebootDelay
	if stalled {
		delay = 0
		a.log.Warn("the reboot did not happen; requesting it again", "requested", since, "method", a.opts.Rebooter.String())
		a.recorder.Eventf(ch, corev1.EventTypeWarning, "RebootStalled", "node %s still runs the same boot %s after its reboot was requested with %s; requesting it again",
			a.opts.NodeName, since, a.opts.Rebooter)
	} else if !announced && how != "" { // a retry after a failed reboot request, or after a restart, is not news
		a.recorder.Eventf(ch, corev1.EventTypeNormal, "Rebooting", "node %s upgraded and %s; rebooting in %s", a.opts.NodeName, how, s.RebootDelay)
	}
	a.log.Info("rebooting", "channel", ch.Name, "delay", delay, "method", a.opts.Rebooter.String())
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(delay):
	}
	if ok, why := plan.MayReboot(s, time.Now()); !ok { // never outside the window
		a.setRebooting(false)
		return a.deferToWindow(ctx, ch, slot, why)
	}
	if err := a.opts.Rebooter.Reboot(ctx); err != nil {
		a.setRebooting(false)
		a.recorder.Eventf(ch, corev1.EventTypeWarning, "RebootStalled", "node %s: the reboot was refused: %v; retrying", a.opts.NodeName, err)
		return fmt.Errorf("reboot node %s with %s: %w", a.opts.NodeName, a.opts.Rebooter, err)
	}
	a.mu.Lock()
	a.rebootAt = time.Now()
	a.mu.Unlock()
	a.queue.AddAfter(key{roleNode, ch.Name}, a.opts.RebootStall) // to see whether it happened
	return nil
}

func (a *Agent) setRebooting(v bool) {
	a.mu.Lock()
	a.rebooting = v
	a.mu.Unlock()
}

// afterReboot runs after the agent restarts in the Rebooting phase: still
// the same boot means the reboot has not happened yet; at the slot's version
// it waits for Ready, publishes the versions, uncordons and frees the slot;
// at another version the boot fell back and the upgrade failed.
func (a *Agent) afterReboot(ctx context.Context, ch *v1.UpdateChannel, s plan.Settings, slot v1.Slot) (time.Duration, error) {
	node := a.ownNode()
	if node == nil {
		return 0, nil
	}
	boot, err := a.bootID()
	if err != nil {
		return 0, err
	}
	if node.Annotations[AnnotationRebootFrom] == boot { // restarted before the reboot happened
		if err := a.confirmSlot(ctx, ch.Name, slot); err != nil {
			return 0, err
		}
		// The Rebooting Event was recorded when the phase was written: one per reboot.
		return 0, a.reboot(ctx, ch, s, slot, "")
	}
	running := a.readableVersions()
	if running == nil {
		return 0, fmt.Errorf("what node %s runs is not known yet", a.opts.NodeName)
	}
	v := *running
	if v.Rootfs != slot.Version {
		return 0, a.fail(ctx, ch, slot, "boot", fmt.Sprintf("node came back at %s, not %s: the boot fell back to the previous version; see the node's console", v.Rootfs, slot.Version))
	}
	if ready, _ := nodeReady(node); !ready {
		if slot.Phase == plan.PhaseWaitingReady {
			return 0, nil // the node informer calls again when it turns Ready
		}
		if wait := slowStep - time.Since(a.notReadySince()); wait > 0 {
			return wait, nil // a node Ready soon costs no status write
		}
		_, err = a.setPhase(ctx, ch, slot, plan.PhaseWaitingReady, slot.Job)
		return 0, err
	}
	return 0, a.succeed(ctx, ch, slot, v)
}

// notReadySince is when this process first saw its node not Ready after a reboot.
func (a *Agent) notReadySince() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.notReadyAt.IsZero() {
		a.notReadyAt = time.Now()
	}
	return a.notReadyAt
}

// cordonedBySlipway reports whether this agent's node carries slipway's cordon.
func (a *Agent) cordonedBySlipway() bool {
	n := a.ownNode()
	return n != nil && drain.CordonedBy(n.Annotations) == CordonOwner
}

func (a *Agent) succeed(ctx context.Context, ch *v1.UpdateChannel, slot v1.Slot, v Versions) error {
	// versions first: the fleet view must not see the old one once the slot is free
	if err := a.uncordonAndPublish(ctx, &v); err != nil {
		return err
	}
	if err := a.freeSlot(ctx, ch, slot); err != nil {
		return err
	}
	a.metrics.upgrade.Observe(time.Since(slot.Since.Time).Seconds())
	a.log.Info("upgraded", "channel", ch.Name, "version", slot.Version)
	a.recorder.Eventf(ch, corev1.EventTypeNormal, "Upgraded", "node %s runs %s, is Ready and uncordoned; slot freed", a.opts.NodeName, slot.Version)
	return nil
}

// fail uncordons the node if slipway cordoned it, frees the slot and
// records the failure with reason.
func (a *Agent) fail(ctx context.Context, ch *v1.UpdateChannel, slot v1.Slot, step, reason string) error {
	// The node is labelled with what this boot runs, whatever its system
	// directory holds (a drain that failed after the swap), so its failure
	// stays counted; the swap is undone below.
	if err := a.uncordonAndPublish(ctx, a.readableVersions()); err != nil {
		return err
	}
	var f v1.Failure
	if _, err := a.updateStatus(ctx, ch.Name, func(c *v1.UpdateChannel) error {
		if _, err := a.mySlot(c, slot); err != nil {
			return err
		}
		f = plan.Fail(&c.Status, a.opts.NodeName, slot.Version, reason, time.Now())
		return nil
	}); err != nil {
		return err
	}
	a.metrics.failures.WithLabelValues(ch.Name, step).Inc()
	a.log.Warn("upgrade failed", "channel", ch.Name, "version", slot.Version, "attempts", f.Attempts, "reason", reason)
	a.recorder.Eventf(ch, corev1.EventTypeWarning, "UpgradeFailed", "node %s (attempt %d): %s", a.opts.NodeName, f.Attempts, reason)
	if step != "boot" {
		return a.undoSwap(ctx, ch)
	}
	return nil
}

// withLog is the drain policy o logging to log.
func withLog(o drain.Options, log *slog.Logger) drain.Options {
	o.Log = log
	return o
}
