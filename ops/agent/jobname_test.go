package agent

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

func TestSlotJobName(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	slot := func(node, version string, attempt int, since time.Time) v1.Slot {
		return v1.Slot{Node: node, Version: version, Attempt: attempt, Since: metav1.NewTime(since)}
	}
	names := map[string]string{}
	for _, tc := range []struct {
		name string
		uid  types.UID
		slot v1.Slot
	}{
		{"first", "uid-a", slot("node-1", "v1.2.3+k3s1", 1, t0)},
		{"retry", "uid-a", slot("node-1", "v1.2.3+k3s1", 2, t0.Add(time.Minute))},
		{"node-10 is not node-1", "uid-a", slot("node-10", "v1.2.3+k3s1", 1, t0)},
		{"a later rollout to the same version", "uid-a", slot("node-1", "v1.2.3+k3s1", 1, t0.Add(time.Hour))},
		{"a recreated channel", "uid-b", slot("node-1", "v1.2.3+k3s1", 1, t0)},
		{"upper case and dots", "uid-a", slot("Node_Upper.example.com", "v2", 1, t0)},
		{"long node v2", "uid-a", slot(strings.Repeat("n", 80), "v2", 1, t0)},
		{"long node v3", "uid-a", slot(strings.Repeat("n", 80), "v3", 1, t0)},
	} {
		got := SlotJobName(tc.uid, tc.slot)
		if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
			t.Errorf("%s: %q is not a DNS label: %v", tc.name, got, errs)
		}
		if other, ok := names[got]; ok {
			t.Errorf("%s: %q collides with %s", tc.name, got, other)
		}
		names[got] = tc.name
	}
	// The fleet view names the Job from the slot it holds in memory (with
	// nanoseconds); the node reads it back from the API (whole seconds).
	if a, b := SlotJobName("u", slot("n", "v2", 1, t0.Add(400*time.Millisecond))), SlotJobName("u", slot("n", "v2", 1, t0)); a != b {
		t.Errorf("the same slot before and after a round trip through the API: %q != %q", a, b)
	}
}

func TestJobOwnedBy(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	s := v1.Slot{Node: "n1", Version: "v2", Attempt: 1, Since: metav1.NewTime(t0)}
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Annotations: jobOwnerAnnotations("uid-a", s)}}
	if ok, why := jobOwnedBy(j, "uid-a", s); !ok {
		t.Fatalf("own job refused: %s", why)
	}
	later := s
	later.Since = metav1.NewTime(t0.Add(time.Hour))
	for name, c := range map[string]struct {
		uid  types.UID
		slot v1.Slot
	}{"another rollout": {"uid-a", later}, "another channel": {"uid-b", s}} {
		if ok, _ := jobOwnedBy(j, c.uid, c.slot); ok {
			t.Errorf("%s: a Job of another slot was believed", name)
		}
	}
	if ok, _ := jobOwnedBy(&batchv1.Job{}, "uid-a", s); ok {
		t.Error("a Job without owner annotations (an older agent's) was believed")
	}
}
