package plan

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestCanaryNodes(t *testing.T) {
	zone := func(name, z string, restarts int32) Candidate {
		return Candidate{Name: name, Labels: map[string]string{"zone": z}, Restarts: restarts}
	}
	cands := []Candidate{zone("a1", "a", 0), zone("a2", "a", 0), zone("a3", "a", 0), zone("b1", "b", 3), zone("b2", "b", 1), zone("c1", "c", 0)}
	tests := []struct {
		name    string
		n       int
		keys    []string
		current []string
		want    []string
	}{
		{"fewest restarts, then name", 2, nil, nil, []string{"a1", "a2"}},
		{"spread across zones, fewest restarts in each", 3, []string{"zone"}, nil, []string{"a1", "b2", "c1"}},
		{"more than the zones: ceil per zone", 5, []string{"zone"}, nil, []string{"a1", "a2", "b1", "b2", "c1"}},
		{"current canary nodes stay", 2, nil, []string{"b1"}, []string{"a1", "b1"}},
		{"a gone current node is replaced", 1, nil, []string{"gone"}, []string{"a1"}},
		{"limit lifted when the spread cannot fill", 4, []string{"zone"}, nil, []string{"a1", "a2", "b2", "c1"}},
		{"zero", 0, nil, nil, nil},
		{"more than candidates", 9, nil, nil, []string{"a1", "a2", "a3", "b1", "b2", "c1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CanaryNodes(cands, tt.n, tt.keys, tt.current); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("CanaryNodes() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCanaryVerdict(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	auto := CanaryPolicy{Duration: 10 * time.Minute, NoRestartsDuration: 5 * time.Minute, AutoPause: true, PauseMaxRestarts: 2,
		AutoFail: true, FailMaxRestarts: 5}
	ready := Health{Ready: true}
	restarting := func(n int32, at time.Time) Health {
		return Health{Restarts: n, RestartReason: "CrashLoopBackOff", LastRestart: at}
	}
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	tests := []struct {
		name   string
		policy CanaryPolicy
		state  CanaryState
		want   Action
		reason string
		after  time.Duration
	}{
		{"young canary continues", auto, CanaryState{Now: at(time.Minute), Start: t0, Pods: []Health{ready}, Expected: 1}, Continue, "", 9 * time.Minute},
		{"after duration, ready: validate", auto, CanaryState{Now: at(11 * time.Minute), Start: t0, Pods: []Health{ready}, Expected: 1}, Validate, ReasonValidated, 0},
		{"after duration, a pod missing: wait", auto, CanaryState{Now: at(11 * time.Minute), Start: t0, Pods: []Health{ready}, Expected: 2}, Continue, "", 0},
		{"a recent restart delays validation", auto, CanaryState{Now: at(11 * time.Minute), Start: t0, Pods: []Health{{Ready: true, Restarts: 1, LastRestart: at(9 * time.Minute)}}, Expected: 1}, Continue, "", 3 * time.Minute},
		{"restarts over autoPause: pause", auto, CanaryState{Now: at(time.Minute), Start: t0, Pods: []Health{restarting(3, at(time.Minute))}, Expected: 1}, Pause, "CrashLoopBackOff", 0},
		{"restarts over autoFail: fail", auto, CanaryState{Now: at(time.Minute), Start: t0, Pods: []Health{ready, restarting(6, at(time.Minute))}, Expected: 2}, Fail, "CrashLoopBackOff", 0},
		{"manual unpause ignores autoPause", auto, CanaryState{Now: at(time.Minute), Start: t0, Pods: []Health{restarting(3, at(time.Minute))}, Expected: 1, ManuallyUnpaused: true}, Continue, "", 9 * time.Minute},
		{"manual unpause does not stop autoFail", auto, CanaryState{Now: at(time.Minute), Start: t0, Pods: []Health{restarting(6, at(time.Minute))}, Expected: 1, ManuallyUnpaused: true}, Fail, "CrashLoopBackOff", 0},
		{"autoPause off", CanaryPolicy{Duration: time.Minute, AutoFail: true, FailMaxRestarts: 5}, CanaryState{Now: at(30 * time.Second), Start: t0, Pods: []Health{restarting(3, at(0))}, Expected: 1}, Continue, "", 30 * time.Second},
		{"cannot start beyond maxSlowStartDuration: pause", CanaryPolicy{AutoPause: true, PauseMaxRestarts: 2, MaxSlowStartDuration: time.Minute, Duration: time.Hour},
			CanaryState{Now: at(2 * time.Minute), Start: t0, Pods: []Health{{CannotStart: "ErrImagePull"}}, Expected: 1, CannotStartSince: at(30 * time.Second)}, Pause, "ErrImagePull", 0},
		{"cannot start, still within maxSlowStartDuration", CanaryPolicy{AutoPause: true, PauseMaxRestarts: 2, MaxSlowStartDuration: time.Minute, Duration: time.Hour},
			CanaryState{Now: at(time.Minute), Start: t0, Pods: []Health{{CannotStart: "ErrImagePull"}}, Expected: 1, CannotStartSince: at(30 * time.Second)}, Continue, "", 30 * time.Second},
		{"canary timeout: fail", CanaryPolicy{Duration: time.Minute, AutoFail: true, FailMaxRestarts: 5, CanaryTimeout: 2 * time.Minute},
			CanaryState{Now: at(3 * time.Minute), Start: t0, Pods: []Health{{CannotStart: "ErrImagePull"}}, Expected: 1}, Fail, ReasonTimeoutExceeded, 0},
		{"restarting too long: fail", CanaryPolicy{Duration: time.Hour, AutoFail: true, FailMaxRestarts: 5, MaxRestartsDuration: time.Minute},
			CanaryState{Now: at(3 * time.Minute), Start: t0, Pods: []Health{restarting(1, at(3*time.Minute))}, Expected: 1, RestartingSince: at(time.Minute)}, Fail, ReasonRestartsTimeoutExceeded, 0},
		// A canary node that left: its restarts count (Past), its readiness does not.
		{"a left node's restarts over autoFail: fail", auto, CanaryState{Now: at(time.Minute), Start: t0, Pods: []Health{ready}, Past: []Health{restarting(6, at(time.Minute))}, Expected: 1}, Fail, "CrashLoopBackOff", 0},
		{"a left node does not hold validation", auto, CanaryState{Now: at(11 * time.Minute), Start: t0, Pods: []Health{ready}, Past: []Health{restarting(1, at(time.Minute))}, Expected: 1}, Validate, ReasonValidated, 0},
		// canary.replicas 0 ("0%"): a timed hold on no node, validated by time.
		{"a canary of no node waits for its duration", auto, CanaryState{Now: at(time.Minute), Start: t0}, Continue, "", 9 * time.Minute},
		{"a canary of no node is validated by time", auto, CanaryState{Now: at(10 * time.Minute), Start: t0}, Validate, ReasonValidated, 0},
		{"a canary of no node, manual: a person decides", CanaryPolicy{Manual: true}, CanaryState{Now: at(10 * time.Hour), Start: t0}, Continue, "", 0},
		// Issue 24 item 9: a canary no node admits fails at once.
		{"no eligible node: fail", auto, CanaryState{Now: at(time.Second), Start: t0, NoEligibleNode: true}, Fail, ReasonNoEligibleNode, 0},
		{"no eligible node, autoFail off: wait", CanaryPolicy{Duration: time.Minute}, CanaryState{Now: at(time.Second), Start: t0, NoEligibleNode: true}, Continue, "", 59 * time.Second},
		{"no eligible node, manual mode: a person decides", CanaryPolicy{Manual: true, AutoFail: true, CanaryTimeout: time.Hour}, CanaryState{Now: at(time.Second), Start: t0, NoEligibleNode: true}, Continue, "", time.Hour - time.Second + time.Millisecond},
		{"never Ready until the timeout: fail", CanaryPolicy{Duration: time.Minute, AutoFail: true, FailMaxRestarts: 5, CanaryTimeout: time.Hour},
			CanaryState{Now: at(time.Hour + time.Second), Start: t0, Pods: []Health{{}}, Expected: 1}, Fail, ReasonTimeoutExceeded, 0},
		// Issue 24 item 7: maxRestartsDuration is a window from the first
		// restart to the latest, not a clock from the first restart.
		{"one early restart, healthy since: continue", CanaryPolicy{Duration: time.Hour, AutoFail: true, FailMaxRestarts: 5, MaxRestartsDuration: time.Minute},
			CanaryState{Now: at(30 * time.Minute), Start: t0, Pods: []Health{{Ready: true, Restarts: 1, LastRestart: at(time.Minute)}}, Expected: 1, RestartingSince: at(time.Minute)}, Continue, "", 30 * time.Minute},
		// Issue 24 item 8: ContainerCreating (DataDog's missing-volume
		// example) is bounded by maxSlowStartDuration when it is set.
		{"creating beyond maxSlowStartDuration: pause", CanaryPolicy{AutoPause: true, PauseMaxRestarts: 2, MaxSlowStartDuration: 2 * time.Minute, Duration: time.Hour},
			CanaryState{Now: at(3 * time.Minute), Start: t0, Pods: []Health{{Creating: true}}, Expected: 1, CreatingSince: at(30 * time.Second)}, Pause, ReasonSlowStartTimeoutExceeded, 0},
		{"creating within maxSlowStartDuration", CanaryPolicy{AutoPause: true, PauseMaxRestarts: 2, MaxSlowStartDuration: 2 * time.Minute, Duration: time.Hour},
			CanaryState{Now: at(time.Minute), Start: t0, Pods: []Health{{Creating: true}}, Expected: 1, CreatingSince: at(30 * time.Second)}, Continue, "", 90 * time.Second},
		{"creating, no maxSlowStartDuration: wait", CanaryPolicy{AutoPause: true, PauseMaxRestarts: 2, Duration: time.Hour},
			CanaryState{Now: at(time.Minute), Start: t0, Pods: []Health{{Creating: true}}, Expected: 1, CreatingSince: at(30 * time.Second)}, Continue, "", 59 * time.Minute},
		{"manual mode waits", CanaryPolicy{Manual: true, AutoPause: true, PauseMaxRestarts: 2}, CanaryState{Now: at(time.Hour), Start: t0, Pods: []Health{ready}, Expected: 1}, Continue, "", 0},
		{"manual validate", CanaryPolicy{Manual: true}, CanaryState{Now: at(time.Minute), Start: t0, Validated: true}, Validate, ReasonManuallyValidated, 0},
		{"manual fail wins", auto, CanaryState{Now: at(time.Minute), Start: t0, Validated: true, ManuallyFailed: true}, Fail, ReasonManuallyFailed, 0},
		{"manual pause", auto, CanaryState{Now: at(11 * time.Minute), Start: t0, Pods: []Health{ready}, Expected: 1, ManuallyPaused: true}, Pause, ReasonManuallyPaused, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := CanaryVerdict(tt.policy, tt.state)
			if v.Action != tt.want || v.Reason != tt.reason || v.RecheckAfter != tt.after {
				t.Errorf("CanaryVerdict() = %+v, want %s %q after %v", v, tt.want, tt.reason, tt.after)
			}
		})
	}
}

func TestPodHealth(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	pod := &corev1.Pod{Status: corev1.PodStatus{
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{
			{Name: "a", RestartCount: 1, LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", FinishedAt: t0}}},
			{Name: "b", RestartCount: 4, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled"}}},
			{Name: "c", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff"}}},
		},
	}}
	want := Health{Restarts: 4, RestartReason: "OOMKilled", LastRestart: t0.Time, CannotStart: "ImagePullBackOff", Ready: true}
	if got := PodHealth(pod); !reflect.DeepEqual(got, want) {
		t.Errorf("PodHealth() = %+v, want %+v", got, want)
	}
	oom := &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{RestartCount: 2,
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled"}}}}}}
	if got := PodHealth(oom); got.RestartReason != "OOMKilled" || got.Ready {
		t.Errorf("PodHealth(oom) = %+v, want OOMKilled, not ready", got)
	}
	// Issue 24 item 8: DataDog's cannot-start reasons, and ContainerCreating.
	for _, reason := range []string{"ImageInspectError", "RegistryUnavailable", "PreStartHookError", "PostStartHookError", "PreCreateHookError",
		"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError", "CreateContainerError"} {
		p := &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}}}}
		if got := PodHealth(p); got.CannotStart != reason {
			t.Errorf("PodHealth(waiting %s).CannotStart = %q", reason, got.CannotStart)
		}
	}
	creating := &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}}}
	if got := PodHealth(creating); !got.Creating || got.CannotStart != "" {
		t.Errorf("PodHealth(ContainerCreating) = %+v, want Creating and no cannot-start reason", got)
	}
}

func TestEligible(t *testing.T) {
	node := func(lbls map[string]string, taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: lbls}, Spec: corev1.NodeSpec{Taints: taints}}
	}
	worker := map[string]string{"role": "worker", "kubernetes.io/hostname": "n"}
	sel, _ := Selector(&metav1.LabelSelector{MatchLabels: map[string]string{"role": "worker"}})
	tests := []struct {
		name string
		node *corev1.Node
		sel  labels.Selector
		spec corev1.PodSpec
		want bool
	}{
		{"plain node", node(nil), labels.Everything(), corev1.PodSpec{}, true},
		{"selector matches", node(worker), sel, corev1.PodSpec{}, true},
		{"selector does not match", node(nil), sel, corev1.PodSpec{}, false},
		{"template nodeSelector", node(worker), labels.Everything(), corev1.PodSpec{NodeSelector: map[string]string{"role": "db"}}, false},
		{"untolerated NoSchedule taint", node(nil, corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}), labels.Everything(), corev1.PodSpec{}, false},
		{"tolerated taint", node(nil, corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}), labels.Everything(),
			corev1.PodSpec{Tolerations: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}}, true},
		{"unschedulable node keeps its daemon", node(nil, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}), labels.Everything(), corev1.PodSpec{}, true},
		{"PreferNoSchedule ignored", node(nil, corev1.Taint{Key: "x", Effect: corev1.TaintEffectPreferNoSchedule}), labels.Everything(), corev1.PodSpec{}, true},
		{"required affinity", node(worker), labels.Everything(), corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "role", Operator: corev1.NodeSelectorOpIn, Values: []string{"db"}}}}}}}}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Eligible(tt.node, tt.sel, &tt.spec); got != tt.want {
				t.Errorf("Eligible() = %v, want %v", got, tt.want)
			}
		})
	}
}
