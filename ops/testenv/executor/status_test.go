package executor

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodStatus(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "upgrade", Image: "slipway"}}}}
	t0 := metav1.NewTime(time.Unix(100, 0))
	t1 := metav1.NewTime(time.Unix(200, 0))
	tests := []struct {
		name      string
		r         run
		phase     corev1.PodPhase
		ready     bool
		exitCode  int32
		terminate bool
	}{
		{"running", run{started: t0, hostIP: "10.0.0.1"}, corev1.PodRunning, true, 0, false},
		{"succeeded", run{started: t0, finished: t1, done: true, reason: "Completed"}, corev1.PodSucceeded, false, 0, true},
		{"failed", run{started: t0, finished: t1, done: true, exitCode: 1, reason: "Error"}, corev1.PodFailed, false, 1, true},
		{"start error", run{started: t0, finished: t0, done: true, exitCode: 127, reason: "StartError"}, corev1.PodFailed, false, 127, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := podStatus(pod, tt.r)
			if st.Phase != tt.phase {
				t.Errorf("phase %s, want %s", st.Phase, tt.phase)
			}
			if len(st.ContainerStatuses) != 1 {
				t.Fatalf("%d container statuses", len(st.ContainerStatuses))
			}
			cs := st.ContainerStatuses[0]
			if cs.Ready != tt.ready {
				t.Errorf("ready %v, want %v", cs.Ready, tt.ready)
			}
			if tt.terminate != (cs.State.Terminated != nil) {
				t.Fatalf("terminated state %+v, want terminated=%v", cs.State, tt.terminate)
			}
			if tt.terminate && cs.State.Terminated.ExitCode != tt.exitCode {
				t.Errorf("exit code %d, want %d", cs.State.Terminated.ExitCode, tt.exitCode)
			}
			if !tt.terminate && cs.State.Running == nil {
				t.Errorf("not running: %+v", cs.State)
			}
			var readyCond corev1.ConditionStatus
			for _, c := range st.Conditions {
				if c.Type == corev1.PodReady {
					readyCond = c.Status
				}
			}
			if (readyCond == corev1.ConditionTrue) != tt.ready {
				t.Errorf("Ready condition %q, want ready=%v", readyCond, tt.ready)
			}
			if st.StartTime == nil || !st.StartTime.Equal(&t0) {
				t.Errorf("start time %v", st.StartTime)
			}
		})
	}
}

func TestSetConditionsKeepsTransitionTime(t *testing.T) {
	t0 := metav1.NewTime(time.Unix(100, 0))
	t1 := metav1.NewTime(time.Unix(200, 0))
	in := []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: t0},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: t0}}
	out := setConditions(in, t1, map[corev1.PodConditionType]corev1.ConditionStatus{
		corev1.PodScheduled: corev1.ConditionTrue, corev1.PodReady: corev1.ConditionFalse,
		corev1.PodInitialized: corev1.ConditionTrue, corev1.ContainersReady: corev1.ConditionFalse})
	got := map[corev1.PodConditionType]corev1.PodCondition{}
	for _, c := range out {
		got[c.Type] = c
	}
	if len(got) != 4 || len(out) != 4 {
		t.Fatalf("conditions %+v", out)
	}
	if s := got[corev1.PodScheduled]; !s.LastTransitionTime.Equal(&t0) {
		t.Errorf("unchanged condition got a new transition time")
	}
	if r := got[corev1.PodReady]; r.Status != corev1.ConditionFalse || !r.LastTransitionTime.Equal(&t1) {
		t.Errorf("Ready = %+v, want False at t1", r)
	}
}
