package eds

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/eds/plan"
)

func restartedPod(name, node string, restarts int32) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "c", RestartCount: restarts,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}}}
}

func TestCanaryRestartHistory(t *testing.T) {
	at := metav1.NewTime(time.Unix(1000, 0))
	cases := []struct {
		name    string
		history []v1.CanaryPodRestarts
		pods    []*corev1.Pod
		current map[string]int // node -> index in health
		canary  []string       // the current canary nodes
		health  []plan.Health
		want    []int32 // restarts per health entry after withHistory
		past    []int32 // restarts per past entry (nodes no longer canary nodes)
		kept    int     // entries in the merged history
	}{
		{"nothing restarted", nil, []*corev1.Pod{restartedPod("a", "n1", 0)}, map[string]int{"n1": 0}, []string{"n1"}, []plan.Health{{Ready: true}}, []int32{0}, nil, 0},
		{"a pod's count is kept", nil, []*corev1.Pod{restartedPod("a", "n1", 3)}, map[string]int{"n1": 0}, []string{"n1"}, []plan.Health{{Restarts: 3}}, []int32{3}, nil, 1},
		{"the pod is gone, its restarts stay, as not Ready", []v1.CanaryPodRestarts{{Pod: "a", Node: "n1", Restarts: 3, Reason: "OOMKilled", LastRestart: at}},
			nil, map[string]int{}, []string{"n1"}, nil, []int32{3}, nil, 1},
		{"a replacement adds to its node", []v1.CanaryPodRestarts{{Pod: "a", Node: "n1", Restarts: 3}},
			[]*corev1.Pod{restartedPod("b", "n1", 3)}, map[string]int{"n1": 0}, []string{"n1"}, []plan.Health{{Restarts: 3}}, []int32{6}, nil, 2},
		{"a count never shrinks", []v1.CanaryPodRestarts{{Pod: "a", Node: "n1", Restarts: 4}},
			[]*corev1.Pod{restartedPod("a", "n1", 1)}, map[string]int{"n1": 0}, []string{"n1"}, []plan.Health{{Restarts: 1}}, []int32{4}, nil, 1},
		{"nodes apart", []v1.CanaryPodRestarts{{Pod: "a", Node: "n1", Restarts: 2}},
			[]*corev1.Pod{restartedPod("b", "n2", 1)}, map[string]int{"n2": 0}, []string{"n1", "n2"}, []plan.Health{{Restarts: 1}}, []int32{1, 2}, nil, 2},
		{"a canary node that left: restarts in the past, readiness not judged", []v1.CanaryPodRestarts{{Pod: "a", Node: "gone", Restarts: 1}},
			[]*corev1.Pod{restartedPod("b", "n2", 0)}, map[string]int{"n2": 0}, []string{"n2"}, []plan.Health{{Ready: true}}, []int32{0}, []int32{1}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			merged := mergeRestarts(tc.history, tc.pods)
			if len(merged) != tc.kept {
				t.Errorf("history %+v: want %d entries", merged, tc.kept)
			}
			got, past := withHistory(tc.health, tc.current, tc.canary, merged)
			if len(past) != len(tc.past) {
				t.Errorf("past %+v, want restarts %v", past, tc.past)
			}
			for i := range min(len(past), len(tc.past)) {
				if past[i].Restarts != tc.past[i] {
					t.Errorf("past entry %d: %d restarts, want %d", i, past[i].Restarts, tc.past[i])
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("health %+v, want restarts %v", got, tc.want)
			}
			for i, w := range tc.want {
				if got[i].Restarts != w {
					t.Errorf("entry %d: %d restarts, want %d (%+v)", i, got[i].Restarts, w, got)
				}
			}
		})
	}
}
