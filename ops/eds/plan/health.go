package plan

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Health is what a pod's status says about its daemon.
type Health struct {
	// Restarts is the highest restart count of its containers.
	Restarts int32
	// LastRestart is when a container last terminated before a restart (zero if never).
	LastRestart time.Time
	// RestartReason is why the most restarted container last stopped
	// (CrashLoopBackOff when waiting in it, else its last termination reason, such as OOMKilled).
	RestartReason string
	// CannotStart is the waiting reason of a container that cannot start
	// (ErrImagePull, ImagePullBackOff, CreateContainerConfigError, ...), "" if none.
	CannotStart string
	// Creating: a container waits in ContainerCreating (a missing volume,
	// say), which may resolve by itself; maxSlowStartDuration bounds it.
	Creating bool
	// Ready is the pod's Ready condition.
	Ready bool
}

// cannotStart are the waiting reasons of a container that will not start
// by itself: DataDog's list, and RunContainerError.
var cannotStart = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true,
	"ImageInspectError": true, "RegistryUnavailable": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true,
	"PreStartHookError": true, "PostStartHookError": true, "PreCreateHookError": true,
}

// PodHealth reads a pod's container statuses (init containers included).
func PodHealth(pod *corev1.Pod) Health {
	var h Health
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			h.Ready = c.Status == corev1.ConditionTrue
		}
	}
	statuses := append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
	for _, cs := range statuses {
		if w := cs.State.Waiting; w != nil && cannotStart[w.Reason] && h.CannotStart == "" {
			h.CannotStart = w.Reason
		}
		if w := cs.State.Waiting; w != nil && w.Reason == "ContainerCreating" {
			h.Creating = true
		}
		if t := cs.LastTerminationState.Terminated; t != nil && t.FinishedAt.Time.After(h.LastRestart) {
			h.LastRestart = t.FinishedAt.Time
		}
		if cs.RestartCount < h.Restarts || (cs.RestartCount == 0 && h.Restarts == 0) {
			continue
		}
		h.Restarts = cs.RestartCount
		switch { // as DataDog's: why the container last ended (StartError, OOMKilled, Error), else the back-off
		case cs.LastTerminationState.Terminated != nil && cs.LastTerminationState.Terminated.Reason != "":
			h.RestartReason = cs.LastTerminationState.Terminated.Reason
		case cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff":
			h.RestartReason = "CrashLoopBackOff"
		default:
			h.RestartReason = "Restarting"
		}
	}
	return h
}

// Available says whether a Ready pod has been Ready for minReady.
func Available(pod *corev1.Pod, minReady time.Duration, now time.Time) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return minReady <= 0 || !c.LastTransitionTime.Add(minReady).After(now)
		}
	}
	return false
}
