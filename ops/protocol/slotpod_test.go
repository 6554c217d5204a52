package protocol

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func slotPod(node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "upgrade-6-node-a-v2-1", Namespace: "slipway-system",
			Labels:      map[string]string{LabelAppName: LabelAppNameUpgrade, LabelJobNode: node},
			Annotations: map[string]string{AnnotationJobNode: node, AnnotationJobVersion: "v2"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "upgrade", Args: []string{"ops", "upgrade", "--version", "v2"}}}},
	}
}

func TestSlotPodOfNode(t *testing.T) {
	yes := true
	for _, tc := range []struct {
		name string
		edit func(p *corev1.Pod)
		want bool
	}{
		{"the node's slot Pod", func(*corev1.Pod) {}, true},
		{"bound to another node", func(p *corev1.Pod) { p.Spec.NodeName = "node-b" }, false},
		{"another node's annotation", func(p *corev1.Pod) { p.Annotations[AnnotationJobNode] = "node-b" }, false},
		{"not bound yet", func(p *corev1.Pod) { p.Spec.NodeName = "" }, false},
		{"without the upgrade label", func(p *corev1.Pod) { delete(p.Labels, LabelAppName) }, false},
		{"a Job's pod (its owner)", func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "Job", Name: "upgrade-6-node-a-v2-1", UID: "u", Controller: &yes}}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := slotPod("node-a")
			tc.edit(p)
			if got := SlotPodOfNode(p, "node-a"); got != tc.want {
				t.Errorf("SlotPodOfNode = %v, want %v", got, tc.want)
			}
		})
	}
	if SlotPodOfNode(nil, "node-a") || SlotPodOfNode(slotPod(""), "") {
		t.Error("a missing pod, or no node, taken for a slot Pod")
	}
}

func TestJobOfSlotPodOutcome(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
	finished := metav1.NewTime(created.Add(40 * time.Second))
	exited := func(code int32, reason string) []corev1.ContainerStatus {
		return []corev1.ContainerStatus{{Name: "upgrade", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: code, Reason: reason, FinishedAt: finished}}}}
	}
	for _, tc := range []struct {
		name         string
		status       corev1.PodStatus
		done, failed bool
		reason       string
		at           time.Time
	}{
		{"pending", corev1.PodStatus{Phase: corev1.PodPending}, false, false, "", time.Time{}},
		{"running", corev1.PodStatus{Phase: corev1.PodRunning}, false, false, "", time.Time{}},
		{"succeeded: done when its container finished", corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: exited(0, "Completed")},
			true, false, "", finished.Time},
		{"succeeded, no container state: its creation", corev1.PodStatus{Phase: corev1.PodSucceeded}, true, false, "", created.Time},
		{"failed: its container's exit", corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: exited(1, "Error")},
			true, true, "PodFailed: Error, exit code 1", finished.Time},
		{"past its deadline: the kubelet's reason", corev1.PodStatus{Phase: corev1.PodFailed, Reason: "DeadlineExceeded",
			Message: "Pod was active on the node longer than the specified deadline"},
			true, true, "DeadlineExceeded: Pod was active on the node longer than the specified deadline", created.Time},
		{"failed, nothing said", corev1.PodStatus{Phase: corev1.PodFailed}, true, true, "PodFailed: the pod failed", created.Time},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := slotPod("node-a")
			p.CreationTimestamp, p.Status = created, tc.status
			j := JobOfSlotPod(p)
			done, failed, reason, at := JobOutcome(j)
			if done != tc.done || failed != tc.failed || reason != tc.reason || !at.Equal(tc.at) {
				t.Errorf("JobOutcome = %v, %v, %q, %s; want %v, %v, %q, %s", done, failed, reason, at, tc.done, tc.failed, tc.reason, tc.at)
			}
			if !JobOfNode(j, "node-a") || j.Name != p.Name || JobArg(j, "--version") != "v2" {
				t.Errorf("the Job a slot Pod stands for: pinned %v, name %q, --version %q", JobOfNode(j, "node-a"), j.Name, JobArg(j, "--version"))
			}
		})
	}
}
