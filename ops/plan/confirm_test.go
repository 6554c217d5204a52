package plan

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

func TestHolds(t *testing.T) {
	st := v1.UpdateChannelStatus{Updating: []v1.Slot{
		{Node: "node-1", Version: "v2", Attempt: 1},
		{Node: "node-10", Version: "v2", Attempt: 3},
	}}
	for _, tc := range []struct {
		name string
		node string
		want v1.Slot
		held bool
	}{
		{"same attempt and version", "node-1", v1.Slot{Version: "v2", Attempt: 1}, true},
		{"any attempt", "node-10", v1.Slot{}, true},
		{"freed: no entry", "node-2", v1.Slot{Version: "v2", Attempt: 1}, false},
		{"a prefix is not the node", "node-", v1.Slot{}, false},
		{"a later attempt replaced it", "node-10", v1.Slot{Version: "v2", Attempt: 2}, false},
		{"another version replaced it", "node-1", v1.Slot{Version: "v3", Attempt: 1}, false},
		// Issue 21 item 4: the same version and attempt granted again later is another slot.
		{"a later grant replaced it", "node-1", v1.Slot{Version: "v2", Attempt: 1, Since: metav1.Unix(1_700_000_000, 0)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Holds(st, tc.node, tc.want); got != tc.held {
				t.Errorf("Holds(%s, %+v) = %v, want %v", tc.node, tc.want, got, tc.held)
			}
		})
	}
	if Holds(v1.UpdateChannelStatus{}, "node-1", v1.Slot{}) {
		t.Error("an empty status holds no slot")
	}
}

func TestDrainBudget(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		started  time.Time
		ok       bool
		left     time.Duration
		expiredW bool
	}{
		{"nothing recorded: the whole timeout", time.Time{}, false, 10 * time.Minute, false},
		{"just started", now, true, 10 * time.Minute, false},
		{"restarted 4 minutes in", now.Add(-4 * time.Minute), true, 6 * time.Minute, false},
		{"exactly at the deadline", now.Add(-10 * time.Minute), true, 0, true},
		{"long past the deadline", now.Add(-time.Hour), true, 0, true},
		{"clock skew: a start in the future counts as now", now.Add(time.Minute), true, 10 * time.Minute, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			left, expired := DrainBudget(tc.started, tc.ok, now, 10*time.Minute)
			if left != tc.left || expired != tc.expiredW {
				t.Errorf("DrainBudget = %v, %v; want %v, %v", left, expired, tc.left, tc.expiredW)
			}
		})
	}
}
