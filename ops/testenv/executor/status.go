package executor

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// run is what the executor knows about one container run.
type run struct {
	started, finished metav1.Time
	exitCode          int32
	reason, message   string // for a terminated container or a pod that failed to start
	done              bool   // the process has ended
	restarts          int32
	last              *corev1.ContainerStateTerminated // previous run (restartPolicy OnFailure)
	podReason         string                           // e.g. DeadlineExceeded
	hostIP            string
}

// podStatus is the status a kubelet would report for the pod's only container in state r.
func podStatus(pod *corev1.Pod, r run) corev1.PodStatus {
	st := *pod.Status.DeepCopy()
	c := pod.Spec.Containers[0]
	cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image, RestartCount: r.restarts}
	if r.last != nil {
		cs.LastTerminationState = corev1.ContainerState{Terminated: r.last}
	}
	ready := corev1.ConditionFalse
	if r.done {
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: r.exitCode, Reason: r.reason, Message: r.message,
			StartedAt: r.started, FinishedAt: r.finished,
		}}
		st.Phase = corev1.PodFailed
		if r.exitCode == 0 {
			st.Phase = corev1.PodSucceeded
		}
		st.Reason = r.podReason
	} else {
		started := true
		cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: r.started}}
		cs.Ready, cs.Started = true, &started
		st.Phase = corev1.PodRunning
		ready = corev1.ConditionTrue
	}
	st.ContainerStatuses = []corev1.ContainerStatus{cs}
	if st.StartTime == nil {
		t := r.started
		st.StartTime = &t
	}
	if r.hostIP != "" {
		st.HostIP, st.PodIP = r.hostIP, r.hostIP
		st.HostIPs = []corev1.HostIP{{IP: r.hostIP}}
		st.PodIPs = []corev1.PodIP{{IP: r.hostIP}}
	}
	st.Conditions = setConditions(st.Conditions, r.started, map[corev1.PodConditionType]corev1.ConditionStatus{
		corev1.PodInitialized:  corev1.ConditionTrue,
		corev1.PodScheduled:    corev1.ConditionTrue,
		corev1.ContainersReady: ready,
		corev1.PodReady:        ready,
	})
	return st
}

// setConditions sets each condition's status, keeping the transition time of
// those that do not change.
func setConditions(conds []corev1.PodCondition, now metav1.Time, want map[corev1.PodConditionType]corev1.ConditionStatus) []corev1.PodCondition {
	out := make([]corev1.PodCondition, 0, len(conds)+len(want))
	seen := map[corev1.PodConditionType]bool{}
	for _, c := range conds {
		if s, ok := want[c.Type]; ok {
			seen[c.Type] = true
			if c.Status != s {
				c.Status, c.LastTransitionTime = s, now
			}
		}
		out = append(out, c)
	}
	for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		if !seen[t] {
			out = append(out, corev1.PodCondition{Type: t, Status: want[t], LastTransitionTime: now})
		}
	}
	return out
}

// terminationReason is the kubelet's reason for a container that exited with code.
func terminationReason(code int32) string {
	if code == 0 {
		return "Completed"
	}
	return "Error"
}
