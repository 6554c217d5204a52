package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/internal/wallclock"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/process"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/upgrade"
	"slipway.dev/slipway/upgrade/layout"
)

// maxSteps bounds the steps one sync carries out (a drain, then the
// reboot, is the longest chain); then it waits for the next change.
const maxSteps = 4

// stepCtx is what a step works on: the channel (as last written), its
// settings, the node's slot (the newer of the cache and its own write) and
// why plan.Next chose the step.
type stepCtx struct {
	ch   *v1.UpdateChannel
	s    plan.Settings
	slot v1.Slot
	why  string
}

// syncNode drives this agent's own slot in channel name: it observes,
// lets plan.Next decide the step, carries it out, and again while a step
// leads straight to the next. What a later step needs is in the API before
// the step that needs it (the slot's phase, the Job, the cordon and boot
// ID on the Node), so a restarted agent carries on where the last stopped.
func (a *Agent) syncNode(ctx context.Context, name string) (time.Duration, error) {
	ch, err := a.getChannel(name)
	if apierrors.IsNotFound(err) {
		return 0, a.idle(ctx, nil)
	} else if err != nil {
		return 0, err
	}
	if a.asks(ch, a.readableVersions()) { // the Node read below, a Job to create or wait for
		ready, release := a.holdWork()
		if !ready {
			return 0, nil // their first fill queues this channel again
		}
		defer release()
	}
	seen, _ := a.mySlot(ch, v1.Slot{})
	if seen != nil && a.reportedEnded(ch, *seen) {
		seen = nil // reported ended; the controller frees it
	}
	s, bad := plan.Resolve(ch.Spec)
	if seen == nil {
		a.forgetSlot(ch.UID) // the slot ended: so does this process's memory of it
		if bad == nil {
			if err := a.syncStage(ctx, ch, s, false); err != nil {
				return 0, err
			}
		}
		a.noteWaiting(ch)
		return 0, a.idle(ctx, ch)
	}
	a.noteSlot(name)
	if bad != nil {
		return 0, nil // the fleet view marks it Invalid; the slot times out if it stays so
	}
	// The slot's Job and its staging read the work watches: held above (a
	// slot not reported ended is work asked of the node).
	sc := &stepCtx{ch: ch, s: s, slot: a.slotNow(ch, *seen)}
	if err := a.syncStage(ctx, ch, s, a.slotUnderWay(sc)); err != nil {
		return 0, err
	}
	for range maxSteps {
		if a.reportedEnded(ch, *seen) { // a step just ended it (a failure, a deferral)
			return 0, a.idle(ctx, ch)
		}
		sc.slot = a.slotNow(ch, *seen)
		o, ok, err := a.observe(sc)
		if err != nil || !ok {
			return 0, err
		}
		var step plan.Step
		step, sc.why = plan.Next(o)
		a.log.Debug("next step", "channel", name, "phase", o.Phase, "step", step, "why", sc.why)
		after, again, err := a.do(ctx, step, sc)
		if errors.Is(err, errSlotGone) {
			a.log.Info("slot was taken away meanwhile", "channel", name)
			return 0, a.idle(ctx, ch)
		}
		if err != nil || !again {
			return after, err
		}
	}
	return 0, nil
}

// slotNow is the node's slot as seen in the channel, at the latest phase
// this node reported (on its Node, or by this process, whose Node the cache
// may not show yet).
func (a *Agent) slotNow(ch *v1.UpdateChannel, seen v1.Slot) v1.Slot {
	reported, _ := plan.Reported(a.reportOf(ch.UID), seen)
	return plan.Newest(reported, a.lastWrote(ch.UID))
}

// observe gathers what plan.Next decides from; ok false when the node's
// own Node is not in the cache yet (its informer calls again).
func (a *Agent) observe(sc *stepCtx) (plan.Observed, bool, error) {
	node := a.ownNode()
	if node == nil {
		return plan.Observed{}, false, nil
	}
	boot, err := a.bootID()
	if err != nil {
		return plan.Observed{}, false, err
	}
	// trust: ops.agent.own-cordon
	o := plan.Observed{Phase: sc.slot.Phase, Target: sc.slot.Version, Job: a.jobState(sc),
		Cordoned: drain.CordonedBy(node.Annotations) == protocol.CordonOwner, BootID: boot,
		RebootFrom: a.rebootFromOf(node), Reboot: a.rebootState(), Staging: a.stagingBusy()}
	// trust: ops.agent.own-ready
	o.Ready, _ = process.NodeReady(node)
	if r := a.readableVersions(); r != nil {
		o.Running = r.Rootfs
		o.Behind = plan.ComponentsBehind(sc.s.Components, *r, a.releaseOf)
	}
	a.observeBeside(sc, node, &o)
	now := wallclock.Now() // windows are read by the wall clock
	if ok, why := plan.MayStart(sc.s, now); !ok {
		o.DrainBlocked = why
	}
	if ok, why := plan.MayReboot(sc.s, now); !ok {
		o.RebootBlocked = why
	}
	return o, true, nil
}

// do carries out step; again says the next step may follow at once, after
// asks to be called again then.
func (a *Agent) do(ctx context.Context, step plan.Step, sc *stepCtx) (after time.Duration, again bool, err error) {
	switch step {
	case plan.StepAlreadyThere:
		return 0, false, a.stepAlreadyThere(ctx, sc)
	case plan.StepCreateJob:
		err := a.stepCreateJob(ctx, sc)
		return 0, err == nil && sc.s.Drain.Enabled, err // an activation's drain is asked at once (beside.go)
	case plan.StepFailJobGone:
		return 0, false, a.fail(ctx, sc.ch, sc.slot, "job", fmt.Sprintf("upgrade %s %s is gone before it swapped %s in; the node is retried",
			a.slotWorkWord(), protocol.SlotJobName(sc.ch.UID, sc.slot), sc.slot.Version))
	case plan.StepPublishSwap:
		after, err := a.stepPublishSwap(ctx, sc)
		return after, false, err
	case plan.StepFailJob:
		name := protocol.SlotJobName(sc.ch.UID, sc.slot)
		return 0, false, a.fail(ctx, sc.ch, sc.slot, "job", fmt.Sprintf("%s %s %s failed (%s)%s", slotJobKind(sc.slot), a.slotWorkWord(), name, a.jobReason(name), a.podMessage(ctx, name)))
	case plan.StepFailForeign:
		name := protocol.SlotJobName(sc.ch.UID, sc.slot)
		_, why := jobOwnedBy(a.job(name), sc.ch.UID, sc.slot)
		return 0, false, a.fail(ctx, sc.ch, sc.slot, "job", fmt.Sprintf("%s %s belongs to another rollout (%s): delete it and the node is retried", a.slotWorkWord(), name, why))
	case plan.StepDeferToWindow:
		return 0, false, a.deferToWindow(ctx, sc.ch, sc.slot, sc.why)
	case plan.StepDrain:
		again, err := a.stepDrain(ctx, sc)
		return 0, again, err
	case plan.StepReboot:
		return 0, false, a.stepReboot(ctx, sc)
	case plan.StepFailFellBack:
		return 0, false, a.fail(ctx, sc.ch, sc.slot, "boot", fmt.Sprintf("node came back at %s, not %s: the boot fell back to the previous version; see the node's console",
			a.readableVersions().Rootfs, sc.slot.Version))
	case plan.StepFailBehind:
		return 0, false, a.fail(ctx, sc.ch, sc.slot, "boot", fmt.Sprintf("node came back at %s, but %s: the upgrade did not move every component the channel names; see the upgrade's log",
			sc.slot.Version, plan.ComponentsBehind(sc.s.Components, *a.readableVersions(), a.releaseOf)))
	case plan.StepWaitReady:
		after, err := a.stepWaitReady(ctx, sc)
		return after, false, err
	case plan.StepSucceed:
		return 0, false, a.succeed(ctx, sc.ch, sc.slot, *a.readableVersions())
	}
	return 0, false, nil // StepWait: an informer calls again on the next change
}

// slotUnderWay reports whether the slot's upgrade owns the system
// directory: its Job exists, or the slot is past it.
func (a *Agent) slotUnderWay(sc *stepCtx) bool {
	switch sc.slot.Phase {
	case "", plan.PhasePending, plan.PhaseUpgrading:
		return a.jobState(sc) != plan.JobNone
	}
	return true
}

// jobState is what plan.Next needs to know of the slot's own upgrade Job.
func (a *Agent) jobState(sc *stepCtx) plan.JobState {
	name := protocol.SlotJobName(sc.ch.UID, sc.slot)
	j := a.job(name)
	switch {
	case j == nil && a.createdMoment(name): // its create returned; the cache shows it a moment later
		return plan.JobRunning
	case j == nil:
		return plan.JobNone
	case !isOwned(jobOwnedBy(j, sc.ch.UID, sc.slot)):
		return plan.JobForeign
	}
	done, failed, _, _ := protocol.JobOutcome(j)
	switch {
	case failed:
		return plan.JobFailed
	case done || a.podSucceeded(j): // the Job controller marks it Complete about a second later
		return plan.JobSucceeded
	}
	return plan.JobRunning
}

func isOwned(ok bool, _ string) bool { return ok }

// jobReason is why Job name failed, from its condition.
func (a *Agent) jobReason(name string) string {
	if j := a.job(name); j != nil {
		if _, _, reason, _ := protocol.JobOutcome(j); reason != "" {
			return reason
		}
	}
	return "failed"
}

// podMessage returns ": <the end of the failed pod's termination message>"
// of Job name (the slot Pod of that name, as the work watches the sync
// holds show it, or the Job's pod, listed), or a pointer to its log when
// there is none.
func (a *Agent) podMessage(ctx context.Context, job string) string {
	logs := "job/" + job
	var pods []corev1.Pod
	if p := a.jobCache().anyPod(a.opts.Namespace + "/" + job); protocol.SlotPodOfNode(p, a.opts.NodeName) {
		pods, logs = []corev1.Pod{*p}, "pod/"+job
	} else if list, err := a.kube.CoreV1().Pods(a.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job}); err == nil {
		pods = list.Items
	}
	for _, p := range pods {
		if msg := terminationMessage(p); msg != "" {
			return ": " + msg
		}
	}
	return "; its pod's log says why (kubectl -n " + a.opts.Namespace + " logs " + logs + ")"
}

// terminationMessage is the last line of pod p's terminated container's
// message (the error is the last line), at most 400 characters.
func terminationMessage(p corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && strings.TrimSpace(t.Message) != "" {
			lines := strings.Split(strings.TrimSpace(t.Message), "\n")
			msg := strings.TrimSpace(lines[len(lines)-1])
			if len(msg) > 400 {
				msg = "..." + msg[len(msg)-400:]
			}
			return msg
		}
	}
	return ""
}

func (a *Agent) job(name string) *batchv1.Job {
	o, ok, _ := a.jobCache().GetByKey(a.opts.Namespace + "/" + name)
	if !ok {
		return nil
	}
	j, _ := o.(*batchv1.Job)
	return j
}

func (a *Agent) succeed(ctx context.Context, ch *v1.UpdateChannel, slot v1.Slot, v Versions) error {
	if slot.Rollback {
		return a.backoutDone(ctx, ch, slot, v) // backout.go
	}
	// the versions with the report: the fleet view must not see the old one once the slot is free
	if err := a.endSlot(ctx, ch, slot, &v, protocol.OutcomeSucceeded, ""); err != nil {
		return err
	}
	a.metrics.upgrade.Observe(wallclock.Since(slot.Since.Time).Seconds())
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
	if err := a.endSlot(ctx, ch, slot, a.readableVersions(), protocol.OutcomeFailed, reason); err != nil {
		return err
	}
	a.metrics.failures.WithLabelValues(ch.Name, step).Inc()
	a.log.Warn("upgrade failed", "channel", ch.Name, "version", slot.Version, "attempt", slot.Attempt, "reason", reason)
	a.recorder.Eventf(ch, corev1.EventTypeWarning, "UpgradeFailed", "node %s (attempt %d): %s", a.opts.NodeName, max(slot.Attempt, 1), reason)
	if step != "boot" {
		return a.undoSwap(ctx, ch)
	}
	return nil
}

// releaseOf is the release the system directory's version folder of
// component came from (its marker), "" when not known.
func (a *Agent) releaseOf(component, version string) string {
	return upgrade.ReleaseOf(layout.New(a.opts.SystemDir).VersionDir(layout.Component(component), version))
}
