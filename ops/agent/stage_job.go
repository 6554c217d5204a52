package agent

import (
	"slices"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/upgrade"
)

// The staging and pruning Jobs are the upgrade Job's pod (same node
// binding, mounts, capabilities) running another command line.

// StageJobName names the staging Job of permit p, try attempt: node,
// version, a short hash of the channel's UID and the permit's time, attempt.
func StageJobName(channelUID string, p v1.StagePermit, attempt int) string {
	permit := protocol.ShortHash(channelUID + "/" + permitSince(p))[:6]
	return protocol.JobName(protocol.JobKindStage, p.Node, p.Version, permit, strconv.Itoa(attempt))
}

// The upgrade Job's phases (`slipway ops upgrade --phase`): a staging Job
// stages, a slot's Job whose release was staged ahead only activates.
const (
	phaseFlag     = "--phase"
	phaseStage    = "stage"
	phaseActivate = "activate"
)

// buildStageJob is the Job that stages p.Version: `ops upgrade --phase stage`.
func (a *Agent) buildStageJob(ch *v1.UpdateChannel, s plan.Settings, p v1.StagePermit, attempt int) *batchv1.Job {
	j := a.buildJob(ch, s, v1.Slot{Node: a.opts.NodeName, Version: p.Version, Attempt: attempt, Since: p.Since})
	j.Name = StageJobName(string(ch.UID), p, attempt)
	setJobAnnotations(j, map[string]string{protocol.AnnotationJobAction: protocol.JobActionStage, protocol.AnnotationJobPermitSince: permitSince(p),
		protocol.AnnotationJobAttempt: strconv.Itoa(attempt)})
	c := &j.Spec.Template.Spec.Containers[0]
	c.Name, c.Args = "stage", append(c.Args, phaseFlag, phaseStage)
	return j
}

// buildPruneJob is the Job that removes the staged releases but keep:
// `ops prune --keep <keep>`.
func (a *Agent) buildPruneJob(ch *v1.UpdateChannel, s plan.Settings, name, keep string) *batchv1.Job {
	s.UpgradeTimeout = rollbackTimeout
	j := a.buildJob(ch, s, v1.Slot{Node: a.opts.NodeName, Version: keep})
	j.Name = name
	setJobAnnotations(j, map[string]string{protocol.AnnotationJobAction: protocol.JobActionPrune})
	c := &j.Spec.Template.Spec.Containers[0]
	c.Name, c.Args = "prune", pruneArgs(c.Args, keep)
	return j
}

// pruneArgs turns the upgrade Job's arguments into `ops prune` with the
// same system directory, lock and mount handling.
func pruneArgs(upgradeArgs []string, keep string) []string {
	args := []string{"ops", "prune"}
	for _, flag := range []string{"--system-dir", "--lock-file"} {
		if v := protocol.ArgAfterFlag(upgradeArgs, flag); v != "" {
			args = append(args, flag, v)
		}
	}
	if slices.Contains(upgradeArgs, "--remount") {
		args = append(args, "--remount")
	}
	if keep != "" {
		args = append(args, "--keep", keep)
	}
	return args
}

// activateOnly reports whether the slot's Job only activates: its first
// attempt, with the slot's version staged in the system directory. A retry
// runs the whole upgrade (which reuses what is staged and downloads the rest).
func (a *Agent) activateOnly(slot v1.Slot) bool {
	if slot.Attempt > 1 {
		return false
	}
	staged, err := upgrade.Prestaged(a.opts.SystemDir)
	return err == nil && slices.Contains(staged, slot.Version)
}

func setJobAnnotations(j *batchv1.Job, kv map[string]string) {
	for k, v := range kv {
		j.Annotations[k] = v
		j.Spec.Template.Annotations[k] = v
	}
}
