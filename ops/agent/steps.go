package agent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// The steps plan.Next chooses, one short function each.

// stepAlreadyThere frees the slot of a node that runs (booted) the target:
// no Job, no reboot. A swap staged but not booted does not count.
func (a *Agent) stepAlreadyThere(ctx context.Context, sc *stepCtx) error {
	a.recorder.Eventf(sc.ch, corev1.EventTypeNormal, "AlreadyUpToDate", "node %s already runs %s; slot freed", a.opts.NodeName, sc.slot.Version)
	return a.succeed(ctx, sc.ch, sc.slot, *a.readableVersions())
}

// stepCreateJob creates the slot's upgrade Pod (slotpod.go; Event
// Upgrading) and marks the slot Upgrading with its name unless the fleet
// view did already.
func (a *Agent) stepCreateJob(ctx context.Context, sc *stepCtx) error {
	if sc.slot.Rollback {
		return a.stepCreateRollbackJob(ctx, sc) // a failed wave's node goes back (backout.go)
	}
	name := protocol.SlotJobName(sc.ch.UID, sc.slot)
	j := a.buildJob(sc.ch, sc.s, sc.slot)
	if a.activateOnly(sc.slot) { // staged ahead: the slot only swaps
		c := &j.Spec.Template.Spec.Containers[0]
		c.Args = append(c.Args, phaseFlag, phaseActivate)
	}
	what, err := a.createSlotWork(ctx, sc.ch, j) // AlreadyExists only for this very Pod (or Job)
	switch {
	case apierrors.IsAlreadyExists(err):
	case err != nil:
		a.jobRefused(sc.ch, what, err)
		return fmt.Errorf("create upgrade %s: %w", what, err)
	default:
		a.log.Info("upgrade created", "channel", sc.ch.Name, "work", what, "version", sc.slot.Version, "attempt", sc.slot.Attempt)
		a.recorder.Eventf(sc.ch, corev1.EventTypeNormal, "Upgrading", "node %s took a slot: %s upgrades it to %s (attempt %d)", a.opts.NodeName, what, sc.slot.Version, sc.slot.Attempt)
	}
	a.noteCreated(name) // the turns before the cache shows it see it running, not missing
	if sc.slot.Phase == plan.PhaseUpgrading && sc.slot.Job == name {
		return nil // the pod informer calls again when it finishes
	}
	_, err = a.setPhase(ctx, sc.ch, sc.slot, plan.PhaseUpgrading, name)
	return err
}

// stepDrain asks the controller to drain the node (the drain is the
// controller's: no agent may evict a pod), once its Job staged the swap, or
// as soon as the Job exists when it only activates (beside.go): with the
// slot confirmed by the API server, it records on its Node the boot it
// reboots from and what the system directory stages now (before an
// activation's swap: nothing; stepPublishSwap says it later when the drain
// is slow), and reports the slot Draining, in one write. The controller
// cordons, drains and marks the slot Rebooting in the node's view; a
// failed drain frees the slot with the failure. With drain disabled the
// node reports Rebooting at once. again says the reboot may follow now.
func (a *Agent) stepDrain(ctx context.Context, sc *stepCtx) (again bool, err error) {
	boot, err := a.bootID()
	if err != nil {
		return false, err
	}
	if sc.slot.Phase == plan.PhaseDraining && a.rebootFromOf(a.ownNode()) == boot {
		return false, nil // asked already: its view says when the controller is done
	}
	if err := a.confirmSlot(ctx, sc.ch, sc.slot); err != nil {
		return false, err
	}
	var pub *versionsOut
	if running := a.readableVersions(); running != nil {
		out := a.versionsNow(*running) // what runs and what the reboot starts, as a publish would write them
		pub = &out
	}
	extra := map[string]any{protocol.AnnotationRebootFrom: boot}
	phase, how := plan.PhaseDraining, "drained by the controller"
	if !sc.s.Drain.Enabled {
		phase, how = plan.PhaseRebooting, "drain disabled"
	}
	if sc.slot.Job == "" {
		sc.slot.Job = protocol.SlotJobName(sc.ch.UID, sc.slot)
	}
	if err := a.reportSlotWith(ctx, sc.ch, sc.slot, phase, sc.slot.Job, pub, extra); err != nil { // notes the phase written
		return false, err
	}
	a.noteRebootFrom(boot, how)
	return phase == plan.PhaseRebooting, nil
}

// stepReboot requests the reboot: right after this process drained (with
// the Rebooting Event), or after a restart on the same boot or a stalled
// reboot (the slot confirmed with the API server first).
func (a *Agent) stepReboot(ctx context.Context, sc *stepCtx) error {
	how := a.drainedHow()
	if how != "" && sc.slot.Message != "" {
		how = sc.slot.Message // what the controller's drain did
	}
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
// Ready within plan.SlowStep costs no status write, a slower one shows
// WaitingReady.
func (a *Agent) stepWaitReady(ctx context.Context, sc *stepCtx) (time.Duration, error) {
	if sc.slot.Phase == plan.PhaseWaitingReady {
		return 0, nil // the node informer calls again when it turns Ready
	}
	if wait := plan.SlowStep - time.Since(a.firstSeen(&a.notReadyAt)); wait > 0 {
		return wait, nil
	}
	_, err := a.setPhase(ctx, sc.ch, sc.slot, plan.PhaseWaitingReady, sc.slot.Job)
	return 0, err
}

// firstSeen is when this process first saw what *at records (its node not
// Ready after a reboot, its activation swapped while the drain went on):
// set to now the first time it is asked for.
func (a *Agent) firstSeen(at *time.Time) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	if at.IsZero() {
		*at = time.Now()
	}
	return *at
}
