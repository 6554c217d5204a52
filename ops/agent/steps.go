package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/agent/plan"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
)

// The steps plan.Next chooses, one short function each.

// stepAlreadyThere frees the slot of a node that runs (booted) the target:
// no Job, no reboot. A swap staged but not booted does not count.
func (a *Agent) stepAlreadyThere(ctx context.Context, sc *stepCtx) error {
	a.recorder.Eventf(sc.ch, corev1.EventTypeNormal, "AlreadyUpToDate", "node %s already runs %s; slot freed", a.opts.NodeName, sc.slot.Version)
	return a.succeed(ctx, sc.ch, sc.slot, *a.readableVersions())
}

// stepCreateJob creates the slot's upgrade Job (Event Upgrading) and marks
// the slot Upgrading with its name unless the fleet view did already.
func (a *Agent) stepCreateJob(ctx context.Context, sc *stepCtx) error {
	name := SlotJobName(sc.ch.UID, sc.slot)
	j := a.buildJob(sc.ch, sc.s, sc.slot)
	if a.activateOnly(sc.slot) { // staged ahead: the slot only swaps
		c := &j.Spec.Template.Spec.Containers[0]
		c.Args = append(c.Args, "--phase", "activate")
	}
	_, err := a.kube.BatchV1().Jobs(a.opts.Namespace).Create(ctx, j, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
	case err != nil:
		a.jobRefused(sc.ch, name, err)
		return fmt.Errorf("create upgrade job %s: %w", name, err)
	default:
		a.log.Info("upgrade job created", "channel", sc.ch.Name, "job", name, "version", sc.slot.Version, "attempt", sc.slot.Attempt)
		a.recorder.Eventf(sc.ch, corev1.EventTypeNormal, "Upgrading", "node %s took a slot: job %s upgrades it to %s (attempt %d)", a.opts.NodeName, name, sc.slot.Version, sc.slot.Attempt)
	}
	if sc.slot.Phase == plan.PhaseUpgrading && sc.slot.Job == name {
		return nil // the Job informer calls again when it finishes
	}
	_, err = a.setPhase(ctx, sc.ch, sc.slot, plan.PhaseUpgrading, name)
	return err
}

// stepDrain confirms the slot with the API server (a cached channel may
// still show a slot freed a moment ago), records the boot it reboots from
// and what is staged, cordons and drains the node (per spec.drain), and
// marks the slot Rebooting. A failed drain records the failure.
func (a *Agent) stepDrain(ctx context.Context, sc *stepCtx) error {
	if err := a.confirmSlot(ctx, sc.ch, sc.slot); err != nil {
		return err
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
	if sc.s.Drain.Enabled {
		if drained, err = a.cordonAndDrain(ctx, sc, rebootFrom); err != nil || drained == "" {
			return err
		}
	} else if err := a.patchNode(ctx, nil, anyMap(rebootFrom)); err != nil {
		return err
	}
	a.noteRebootFrom(boot, drained)
	if sc.slot.Job == "" {
		sc.slot.Job = SlotJobName(sc.ch.UID, sc.slot)
	}
	written, err := a.setPhase(ctx, sc.ch, sc.slot, plan.PhaseRebooting, sc.slot.Job)
	if written != nil {
		sc.ch = written
	}
	return err
}

// cordonAndDrain cordons (the boot ID, the staged versions and the drain's
// start ride on the cordon's write) and drains within what is left of
// drain.timeout. It returns what it did for the Rebooting Event, or ""
// after recording the drain's failure.
func (a *Agent) cordonAndDrain(ctx context.Context, sc *stepCtx, meta map[string]string) (string, error) {
	start := time.Now()
	opts, began, err := a.drainBudget(ctx, drainOptions(sc.s.Drain))
	if err != nil {
		return "", err
	}
	meta[AnnotationDrainStarted] = began.UTC().Format(time.RFC3339Nano)
	if err := drain.Cordon(ctx, a.kube, a.opts.NodeName, CordonOwner, meta); err != nil {
		return "", err
	}
	stop := a.markIfSlow(ctx, sc, plan.PhaseDraining)
	a.guard.hold(sc.ch, sc.slot) // every eviction confirms the slot first (guard.go)
	res, err := drain.Drain(ctx, a.drainKube, a.opts.NodeName, withLog(opts, a.log))
	a.guard.hold(nil, v1.Slot{})
	stop()
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if errors.Is(err, errSlotGone) || errors.Is(a.confirmSlot(ctx, sc.ch, sc.slot), errSlotGone) {
			return "", errSlotGone // no failure of a slot no longer held: the agent uncordons
		}
		return "", a.fail(ctx, sc.ch, sc.slot, "drain", fmt.Sprintf("drain failed, node uncordoned: %v (drain began %s; drain.timeout %s counts from then)",
			err, began.UTC().Format(time.RFC3339), sc.s.Drain.Timeout))
	}
	a.metrics.drain.Observe(time.Since(start).Seconds())
	return fmt.Sprintf("cordoned and drained in %s (%d pods evicted, %d deleted)",
		time.Since(start).Round(time.Millisecond), len(res.Evicted), len(res.Deleted)), nil
}

// slowStep is how long a step may take before its phase is written to the
// slot: a quick drain costs no status write, a slow one shows in status.
const slowStep = 2 * time.Second

// markIfSlow writes phase to this node's slot once slowStep passed, unless
// the returned stop is called first; stop waits for a write in flight.
func (a *Agent) markIfSlow(ctx context.Context, sc *stepCtx, phase string) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	ch, slot := sc.ch, sc.slot
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

// stepReboot requests the reboot: right after this process drained (with
// the Rebooting Event), or after a restart on the same boot or a stalled
// reboot (the slot confirmed with the API server first).
func (a *Agent) stepReboot(ctx context.Context, sc *stepCtx) error {
	how := a.drainedHow()
	if how == "" {
		if err := a.confirmSlot(ctx, sc.ch, sc.slot); err != nil {
			return err
		}
	}
	a.guard.hold(sc.ch, sc.slot) // the Rebooter confirms the slot again after rebootDelay (guard.go)
	defer a.guard.hold(nil, v1.Slot{})
	return a.reboot(ctx, sc.ch, sc.s, sc.slot, how)
}

// stepWaitReady waits for a node back at the target to turn Ready: a node
// Ready within slowStep costs no status write, a slower one shows
// WaitingReady.
func (a *Agent) stepWaitReady(ctx context.Context, sc *stepCtx) (time.Duration, error) {
	if sc.slot.Phase == plan.PhaseWaitingReady {
		return 0, nil // the node informer calls again when it turns Ready
	}
	if wait := slowStep - time.Since(a.notReadySince()); wait > 0 {
		return wait, nil
	}
	_, err := a.setPhase(ctx, sc.ch, sc.slot, plan.PhaseWaitingReady, sc.slot.Job)
	return 0, err
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

// drainOptions is the channel's drain policy as ops/drain takes it.
func drainOptions(d plan.Drain) drain.Options {
	return drain.Options{Timeout: d.Timeout, GracePeriodSeconds: d.GracePeriodSeconds, DeleteEmptyDirData: d.DeleteEmptyDirData,
		IgnoreDaemonSets: d.IgnoreDaemonSets, Force: d.Force, PodSelector: d.PodSelector}
}
