package protocol

import (
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/upgrade/layout"
)

// What the slot's Job says to whoever reads it: its outcome, and the
// arguments of its command (`slipway ops upgrade --version ... --phase ...`)
// that the agent wrote and the node's executor runs.

// The values of AnnotationJobAction: what a Job beside the slots' upgrade
// Jobs does (`ops upgrade --phase stage`, `ops prune`, `ops rollback`).
const (
	JobActionStage    = "stage"
	JobActionPrune    = "prune"
	JobActionRollback = "rollback"
)

// ComponentFlag is each component's switch of `ops rollback` in a rollback
// Job's arguments (--rootfs=true ...).
var ComponentFlag = map[layout.Component]string{layout.Rootfs: "rootfs", layout.Kernel: "kernel", layout.K3s: "k3s"}

// JobOfNode reports whether Job j is one of node's own: its pod template
// is pinned to node (spec.template.spec.nodeName, what the kubelet runs),
// and its node annotation agrees. The admission policy admits an agent's
// Job only pinned to the agent's own node, so a Job pinned to node was
// created by node's agent (or an administrator); its labels, annotations
// and name alone prove nothing. Every reader of Jobs and their pods
// (agent and controller) takes only such Jobs for node's.
func JobOfNode(j *batchv1.Job, node string) bool {
	// trust: ops.job.node-pin
	return j != nil && node != "" && j.Spec.Template.Spec.NodeName == node && j.Annotations[AnnotationJobNode] == node
}

// PodOfJob reports whether pod p is a pod of Job j on node: controlled by
// j (its controller reference names j's UID: the Job controller sets it,
// no template can) and scheduled to node.
func PodOfJob(p *corev1.Pod, j *batchv1.Job, node string) bool {
	if p == nil || j == nil || p.Spec.NodeName != node {
		return false
	}
	// trust: ops.job.pod-owner
	ref := metav1.GetControllerOf(p)
	return ref != nil && ref.UID == j.UID && ref.Kind == "Job"
}

// JobOutcome reads a Job's conditions: done, and if it failed, why and when.
func JobOutcome(j *batchv1.Job) (done, failed bool, reason string, at time.Time) {
	// trust: ops.job.outcome
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return true, false, "", c.LastTransitionTime.Time
		case batchv1.JobFailed:
			return true, true, c.Reason + ": " + c.Message, c.LastTransitionTime.Time
		}
	}
	return false, false, "", time.Time{}
}

// JobArg is the value of flag in the arguments of Job j's first container.
func JobArg(j *batchv1.Job, flag string) string {
	if len(j.Spec.Template.Spec.Containers) == 0 {
		return ""
	}
	return ArgAfterFlag(j.Spec.Template.Spec.Containers[0].Args, flag)
}

// ArgAfterFlag is the value of flag in args: "--flag value" or "--flag=value".
func ArgAfterFlag(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}
