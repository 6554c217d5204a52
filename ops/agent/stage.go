package agent

import (
	"context"
	"fmt"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/upgrade"
)

// Staging ahead of the slot, the node's side: with a staging permit from
// the Lease holder (status.staging), the agent runs a staging Job
// (`ops upgrade --phase stage`: download and verify into the system
// directory, no link moved, so what boots never changes), reports the
// staged release on its Node and gives the permit back. The slot's Job
// then only activates it (`--phase activate`). A release staged that is
// no longer the target is removed by a pruning Job (`ops prune`).
// plan.NextStage decides; one short function per step.

// syncStage carries out the next staging step for channel ch, which this
// node follows; inSlot says the slot's upgrade owns the system directory.
func (a *Agent) syncStage(ctx context.Context, ch *v1.UpdateChannel, s plan.Settings, inSlot bool) error {
	node := a.ownNode()
	running := a.readableVersions()
	if node == nil || running == nil || !a.followsChannel(ch, s, node) {
		return nil
	}
	onDisk, err := upgrade.Prestaged(a.opts.SystemDir)
	if err != nil {
		return err
	}
	permit := a.permitOf(ch)
	if permit != nil || inSlot || len(onDisk) > 0 { // a Job to run or to wait for
		ready, release := a.holdWork()
		if !ready {
			return nil // their first fill queues this channel again
		}
		defer release()
	}
	published, publishedFailed := a.prestageMarks()
	o := plan.StageObserved{Target: plan.Target(s, ch.Status), Running: running.Rootfs, OnDisk: onDisk, Permit: permit != nil,
		Busy: a.jobsBusy(), InSlot: inSlot, Published: published, PublishedFailed: publishedFailed}
	if permit != nil {
		o.Failures = a.stageFailures(*permit)
	}
	step, why := plan.NextStage(o)
	a.log.Debug("next staging step", "channel", ch.Name, "step", step, "why", why)
	switch step {
	case plan.StagePrune:
		return a.stepStagePrune(ctx, ch, s, o)
	case plan.StagePublish:
		return a.stepStagePublish(ctx, ch, o)
	case plan.StageRelease:
		return a.releasePermit(ctx, ch)
	case plan.StageCreate:
		return a.stepStageCreate(ctx, ch, s, *permit, o.Failures)
	}
	return nil
}

// followsChannel reports whether node follows ch: ch selects it and no
// earlier valid channel does.
func (a *Agent) followsChannel(ch *v1.UpdateChannel, s plan.Settings, node *corev1.Node) bool {
	if !s.Selector.Matches(labels.Set(node.Labels)) {
		return false
	}
	mine, _ := plan.Split(plan.Ref(ch, s), a.channelRefs(), []plan.Node{{Name: node.Name, Labels: node.Labels}})
	return len(mine) == 1
}

// permitOf is this node's staging permit in ch at its target, nil when none.
func (a *Agent) permitOf(ch *v1.UpdateChannel) *v1.StagePermit {
	i := plan.FindPermit(ch.Status, a.opts.NodeName)
	if i < 0 || ch.Status.Staging[i].Version != plan.Target(mustResolve(ch), ch.Status) {
		return nil
	}
	if done := a.reportOf(ch.UID).PermitDone; done != nil && done.Unix() == ch.Status.Staging[i].Since.Unix() {
		return nil // given back; the controller takes it away
	}
	p := ch.Status.Staging[i]
	return &p
}

// stepStageCreate starts the staging run of permit p: a Pod of its own
// like a slot's work (createSlotWork; a Job under the webhook isolation),
// off the Job controller's queue. No Event: a staging run disrupts
// nothing, and the Pod itself is the record.
func (a *Agent) stepStageCreate(ctx context.Context, ch *v1.UpdateChannel, s plan.Settings, p v1.StagePermit, failures int) error {
	j := a.buildStageJob(ch, s, p, failures+1)
	what, err := a.createSlotWork(ctx, ch, j) // AlreadyExists only for this very Pod (or Job)
	if apierrors.IsAlreadyExists(err) {
		return nil
	} else if err != nil {
		a.jobRefused(ch, what, err)
		return fmt.Errorf("create staging %s: %w", what, err)
	}
	a.noteCreated(j.Name)
	a.log.Info("staging created", "channel", ch.Name, "work", what, "version", p.Version, "attempt", failures+1)
	return nil
}

// stepStagePrune starts the Job that removes the staged releases other
// than the target; the Job informer calls again when it ends.
func (a *Agent) stepStagePrune(ctx context.Context, ch *v1.UpdateChannel, s plan.Settings, o plan.StageObserved) error {
	stale := plan.StaleStages(o.OnDisk, o.Target)
	name := protocol.JobName(protocol.JobKindPrune, a.opts.NodeName, protocol.ShortHash(fmt.Sprint(stale, o.Target, a.knownBootID(), time.Now().Unix()/60))[:8])
	if a.job(name) != nil {
		return nil // made this minute already
	}
	err := a.createJob(ctx, ch, a.buildPruneJob(ch, s, name, o.Target)) // AlreadyExists only for this very Job
	if apierrors.IsAlreadyExists(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("create pruning job %s: %w", name, err)
	}
	a.noteCreated(name)
	a.log.Info("removing staged releases that are not the target", "job", name, "stale", stale, "target", o.Target)
	a.recorder.Eventf(ch, corev1.EventTypeNormal, "PruningStaged", "node %s: job %s removes staged %v (the target is %q)", a.opts.NodeName, name, stale, o.Target)
	return nil
}

// stepStagePublish writes what is staged (or that staging gave up) on the
// Node; when that ends staging, the permit goes back in the same write.
func (a *Agent) stepStagePublish(ctx context.Context, ch *v1.UpdateChannel, o plan.StageObserved) error {
	staged, failed := plan.StageReport(o)
	published := map[string]any{protocol.AnnotationPrestagedVersion: nilIfEmpty(staged), protocol.AnnotationPrestageFailedVersion: nilIfEmpty(failed)}
	if plan.PublishEndsStaging(o) {
		return a.releasePermitWith(ctx, ch, published)
	}
	return a.publishMarks(ctx, published)
}

// releasePermit reports on the Node that this node gave its staging permit
// back (the permit's claim time); the controller takes the permit away
// and gives none again to the node for that target.
func (a *Agent) releasePermit(ctx context.Context, ch *v1.UpdateChannel) error {
	return a.releasePermitWith(ctx, ch, nil)
}

// releasePermitWith is releasePermit writing the annotations extra too, in
// the same write (extra alone when the node holds no permit).
func (a *Agent) releasePermitWith(ctx context.Context, ch *v1.UpdateChannel, extra map[string]any) error {
	i := plan.FindPermit(ch.Status, a.opts.NodeName)
	if i < 0 {
		if len(extra) == 0 {
			return nil
		}
		return a.publishMarks(ctx, extra)
	}
	since := ch.Status.Staging[i].Since
	return a.reportWith(ctx, ch, func(r *protocol.Report) { r.PermitDone = &since }, nil, extra, nil)
}

// createdLag bounds how long a Job this process created counts as running
// while its cache does not show it.
const createdLag = 30 * time.Second

// noteCreated remembers that this process created Job name.
func (a *Agent) noteCreated(name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.created[name] = time.Now()
}

// createdMoment reports whether this process created Job name (or found
// it existing) less than createdLag ago: then its absence from the cache
// is the cache's lag, not a Job gone.
func (a *Agent) createdMoment(name string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.created[name]
	return ok && time.Since(at) <= createdLag
}

// createdUnseen reports whether a Job this process created a moment ago
// is not in its cache yet (then it counts as running).
func (a *Agent) createdUnseen() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	unseen := false
	for name, at := range a.created {
		if a.job(name) != nil || time.Since(at) > createdLag {
			delete(a.created, name)
		} else {
			unseen = true
		}
	}
	return unseen
}

// jobsBusy reports whether a Job of this node that writes the system
// directory (upgrade, staging, pruning, rollback) has not finished.
func (a *Agent) jobsBusy() bool {
	if a.createdUnseen() {
		return true
	}
	for _, o := range a.jobCache().List() {
		if j, ok := o.(*batchv1.Job); ok && j.Annotations[protocol.AnnotationJobNode] == a.opts.NodeName && !a.jobDone(j) {
			return true
		}
	}
	return false
}

// stagingBusy reports whether a staging or pruning Job of this node runs
// (or was created a moment ago and is not in the cache yet).
func (a *Agent) stagingBusy() bool {
	if a.createdUnseen() {
		return true
	}
	for _, o := range a.jobCache().List() {
		j, ok := o.(*batchv1.Job)
		if ok && j.Annotations[protocol.AnnotationJobNode] == a.opts.NodeName && slices.Contains([]string{protocol.JobActionStage, protocol.JobActionPrune}, j.Annotations[protocol.AnnotationJobAction]) && !a.jobDone(j) {
			return true
		}
	}
	return false
}

func (a *Agent) jobDone(j *batchv1.Job) bool {
	done, _, _, _ := protocol.JobOutcome(j)
	return done || a.podSucceeded(j)
}

// stageFailures counts the failed staging Jobs of permit p.
func (a *Agent) stageFailures(p v1.StagePermit) int {
	n := 0
	for _, o := range a.jobCache().List() {
		j, ok := o.(*batchv1.Job)
		if !ok || j.Annotations[protocol.AnnotationJobAction] != protocol.JobActionStage || j.Annotations[protocol.AnnotationJobNode] != a.opts.NodeName ||
			j.Annotations[protocol.AnnotationJobPermitSince] != permitSince(p) || j.Annotations[protocol.AnnotationJobVersion] != p.Version {
			continue
		}
		if _, failed, _, _ := protocol.JobOutcome(j); failed {
			n++
		}
	}
	return n
}

func permitSince(p v1.StagePermit) string {
	return p.Since.Time.UTC().Truncate(time.Second).Format(time.RFC3339)
}
