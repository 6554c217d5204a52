package agent

import (
	"context"
	"fmt"
	"os"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/wallclock"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/upgrade/layout"
)

// A rollback slot (Slot.Rollback, granted when a channel's analysis failed
// after a wave and spec.analysis.onFailure is rollback) takes the node
// back to slot.Version, the version it ran before the wave (slot.From).
// It is an upgrade slot in every step but its Job: `ops rollback
// --reboot=false` swaps the system directory's current and previous back,
// then the node is drained, rebooted and confirmed at slot.Version as
// after an upgrade (plan.Next). A node whose previous version is gone
// fails its slot before any Job, uncordoned.

// backoutPlan is what a rollback slot's Job rolls back, or why it cannot.
type backoutPlan struct {
	Components []layout.Component
	Problem    string // "" when the rollback can go
}

// planBackout decides the rollback of a node from from (the failed wave's
// version) to to: every component the channel moves whose current came
// with from (its version, or its folder's release marker: a k3s of the
// release has a version of its own) is rolled back, each only when its
// previous is to (rootfs) or names a version present (the others); the
// rootfs must be among them. dirExists tells whether a component's
// version folder is on disk, releaseOf which release a folder came from.
func planBackout(comps plan.Components, current, previous Versions, from, to string, dirExists func(layout.Component, string) bool,
	releaseOf func(component, version string) string) backoutPlan {
	var out backoutPlan
	for _, c := range layout.Components {
		if c == layout.Kernel && !comps.Kernel || c == layout.K3s && !comps.K3s {
			continue
		}
		cur, prev := versionOf(current, c), versionOf(previous, c)
		if c == layout.Rootfs && cur != from {
			return backoutPlan{Problem: fmt.Sprintf("its rootfs current names %s, not the failed wave's %s: nothing of that wave to roll back", orNone(cur), from)}
		}
		if c != layout.Rootfs && (cur == "" || cur != from && releaseOf(string(c), cur) != from) {
			continue // not moved by the wave
		}
		switch {
		case prev == "":
			return backoutPlan{Problem: fmt.Sprintf("its previous version is gone: no %s previous link", protocol.ComponentFlag[c])}
		case c == layout.Rootfs && prev != to:
			return backoutPlan{Problem: fmt.Sprintf("its previous version is gone: the rootfs previous names %s, not %s", prev, to)}
		case !dirExists(c, prev):
			return backoutPlan{Problem: fmt.Sprintf("its previous version is gone: %s %s is not on disk", protocol.ComponentFlag[c], prev)}
		}
		out.Components = append(out.Components, c)
	}
	return out
}

// stepCreateRollbackJob creates a rollback slot's Pod (Event RollingBack)
// and marks the slot Upgrading with its name, or fails the slot when the
// node's previous version is gone.
func (a *Agent) stepCreateRollbackJob(ctx context.Context, sc *stepCtx) error {
	name := protocol.SlotJobName(sc.ch.UID, sc.slot)
	if a.job(name) == nil && !a.createdMoment(name) {
		current := a.currentVersions()
		if current == nil {
			return fmt.Errorf("rollback slot: the system directory's versions cannot be read")
		}
		l := layout.New(a.opts.SystemDir)
		d := planBackout(sc.s.Components, *current, a.previousVersions(), sc.slot.From, sc.slot.Version, func(c layout.Component, v string) bool {
			_, err := os.Stat(l.VersionDir(c, v))
			return err == nil
		}, a.releaseOf)
		if d.Problem != "" {
			return a.fail(ctx, sc.ch, sc.slot, "rollback", fmt.Sprintf("cannot roll back from %s to %s: %s", sc.slot.From, sc.slot.Version, d.Problem))
		}
		what, err := a.createSlotWork(ctx, sc.ch, a.buildBackoutJob(sc.ch, sc.s, sc.slot, *current, d.Components)) // AlreadyExists only for this very Pod (or Job)
		switch {
		case apierrors.IsAlreadyExists(err):
		case err != nil:
			a.jobRefused(sc.ch, what, err)
			return fmt.Errorf("create rollback %s: %w", what, err)
		default:
			a.metrics.rollbacks.Inc()
			a.log.Info("rollback created", "channel", sc.ch.Name, "work", what, "from", sc.slot.From, "to", sc.slot.Version, "components", d.Components)
			a.recorder.Eventf(sc.ch, corev1.EventTypeWarning, "RollingBack", "node %s took a rollback slot (the analysis failed after its wave): %s rolls %s back from %s to %s",
				a.opts.NodeName, what, componentList(d.Components), sc.slot.From, sc.slot.Version)
		}
		a.noteCreated(name)
	}
	if sc.slot.Phase == plan.PhaseUpgrading && sc.slot.Job == name {
		return nil // the Job informer calls again when it finishes
	}
	_, err := a.setPhase(ctx, sc.ch, sc.slot, plan.PhaseUpgrading, name)
	return err
}

// buildBackoutJob is the rollback slot's Job: the slot's upgrade Job (its
// name, owner annotations, node binding, mounts and capabilities) running
// `ops rollback` of components instead, each from what current names now
// (the failed wave's versions: --from makes a second run swap nothing).
func (a *Agent) buildBackoutJob(ch *v1.UpdateChannel, s plan.Settings, slot v1.Slot, current Versions, components []layout.Component) *batchv1.Job {
	s.UpgradeTimeout = rollbackTimeout
	j := a.buildJob(ch, s, slot)
	setJobAnnotations(j, map[string]string{protocol.AnnotationJobAction: protocol.JobActionRollback})
	c := &j.Spec.Template.Spec.Containers[0]
	c.Name, c.Args = "rollback", rollbackArgs(c.Args, components, current)
	return j
}

// slotJobKind names the kind of a slot's Job in what the agent reports.
func slotJobKind(slot v1.Slot) string {
	if slot.Rollback {
		return "rollback"
	}
	return "upgrade"
}

// backoutJobAt reports whether a rollback slot's Job swapped version in
// (ours: it finished) or still runs (busy): a rollback slot that ends
// before its reboot leaves that swap staged, and undoSwap undoes it as it
// undoes an upgrade's.
func backoutJobAt(jobs []nodeJob, version string) (ours, busy bool) {
	for _, nj := range jobs {
		j := nj.job
		if j.Annotations[protocol.AnnotationJobAction] != protocol.JobActionRollback || j.Annotations[AnnotationRollbackBoot] != "" ||
			j.Annotations[protocol.AnnotationJobVersion] != version {
			continue
		}
		if done, failed, _, _ := protocol.JobOutcome(j); done && !failed || nj.podSucceeded {
			ours = true
		} else if !done {
			busy = true
		}
	}
	return ours, busy
}

// backoutDone ends a rollback slot that brought the node back: the report
// (with the versions), the metric and the Event.
func (a *Agent) backoutDone(ctx context.Context, ch *v1.UpdateChannel, slot v1.Slot, v Versions) error {
	if err := a.endSlot(ctx, ch, slot, &v, protocol.OutcomeSucceeded, ""); err != nil {
		return err
	}
	a.log.Info("rolled back", "channel", ch.Name, "from", slot.From, "to", slot.Version, "took", wallclock.Since(slot.Since.Time).Round(time.Second))
	a.recorder.Eventf(ch, corev1.EventTypeNormal, "RolledBack", "node %s rolled back from %s and runs %s again, is Ready and uncordoned; slot freed",
		a.opts.NodeName, slot.From, v.Rootfs)
	return nil
}
