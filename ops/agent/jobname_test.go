package agent

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

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
