package heartbeat

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestOffsetIsFixedAndSpread(t *testing.T) {
	const period, nodes, bins = 5 * time.Minute, 5000, 10
	counts := make([]int, bins)
	for i := range nodes {
		n := fmt.Sprintf("node-%d", i)
		o := Offset(n, period)
		if o != Offset(n, period) {
			t.Fatalf("Offset(%s) changed between calls", n)
		}
		if o < 0 || o >= period {
			t.Fatalf("Offset(%s) = %v, outside [0, %v)", n, o, period)
		}
		counts[o*bins/period]++
	}
	for i, c := range counts {
		// 500 expected per tenth of the period; a burst or a hole would be far off.
		if c < 400 || c > 600 {
			t.Errorf("tenth %d of the period holds %d of %d reports, want about %d: %v", i, c, nodes, nodes/bins, counts)
		}
	}
}

func TestScheduleReportsEachNodeOncePerPeriodInOffsetOrder(t *testing.T) {
	const period = time.Minute
	nodes := []string{"a", "b", "c", "d", "e", "f", "g"}
	for _, now := range []time.Time{
		time.Unix(1_700_000_000, 0),
		time.Unix(1_700_000_000, 0).Add(Offset("d", period)), // exactly at a node's offset
	} {
		s := newSchedule(nodes, period, now)
		seen := map[string][]time.Time{}
		last := now
		for range 3 * len(nodes) {
			n, at := s.next()
			if at.Before(last) {
				t.Fatalf("now %v: %s at %v, before the previous report at %v", now, n, at, last)
			}
			if got := time.Duration(at.UnixNano() % int64(period)); got != Offset(n, period) {
				t.Errorf("now %v: %s at offset %v, want %v", now, n, got, Offset(n, period))
			}
			last = at
			seen[n] = append(seen[n], at)
		}
		for _, n := range nodes {
			ts := seen[n]
			if len(ts) != 3 {
				t.Fatalf("now %v: %s reported %d times in three periods, want 3", now, n, len(ts))
			}
			if ts[0].Before(now) || ts[0].Sub(now) >= period {
				t.Errorf("now %v: %s first at %v, want within the period ahead", now, n, ts[0])
			}
			for i := 1; i < len(ts); i++ {
				if ts[i].Sub(ts[i-1]) != period {
					t.Errorf("now %v: %s reported %v apart, want %v", now, n, ts[i].Sub(ts[i-1]), period)
				}
			}
		}
	}
}

func TestStatusPatch(t *testing.T) {
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	cond := func(typ corev1.NodeConditionType, st corev1.ConditionStatus) corev1.NodeCondition {
		return corev1.NodeCondition{Type: typ, Status: st}
	}
	for _, c := range []struct {
		name       string
		conditions []corev1.NodeCondition
		want       string // "" = no report
	}{
		{"no conditions", nil, ""},
		{"NotReady", []corev1.NodeCondition{cond(corev1.NodeReady, corev1.ConditionFalse)}, ""},
		{"Ready unknown", []corev1.NodeCondition{cond(corev1.NodeReady, corev1.ConditionUnknown)}, ""},
		{"Ready second", []corev1.NodeCondition{cond(corev1.NodeMemoryPressure, corev1.ConditionFalse), cond(corev1.NodeReady, corev1.ConditionTrue)},
			`[{"op":"test","path":"/status/conditions/1/status","value":"True"},` +
				`{"op":"test","path":"/status/conditions/0/type","value":"MemoryPressure"},` +
				`{"op":"replace","path":"/status/conditions/0/lastHeartbeatTime","value":"2026-11-29T12:00:00Z"},` +
				`{"op":"test","path":"/status/conditions/1/type","value":"Ready"},` +
				`{"op":"replace","path":"/status/conditions/1/lastHeartbeatTime","value":"2026-11-29T12:00:00Z"}]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := statusPatch(c.conditions, at)
			switch {
			case c.want == "" && err == nil:
				t.Errorf("reported: %s", got)
			case c.want != "" && err != nil:
				t.Errorf("not reported: %v", err)
			case c.want != "" && string(got) != c.want:
				t.Errorf("patch\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}
