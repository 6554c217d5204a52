package agentmem

import (
	"testing"
	"time"
)

func TestIdleUnmapAt(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	const quiet, gap = 20 * time.Second, time.Minute
	for _, tc := range []struct {
		name            string
		busy            bool
		idleSince, last time.Time
		want            time.Time
	}{
		{"never busy", false, time.Time{}, at(0), time.Time{}},
		{"busy now", true, at(100), at(0), time.Time{}},
		{"busy spell ended before the last unmapping", false, at(100), at(200), time.Time{}},
		{"turned idle at the last unmapping", false, at(200), at(200), time.Time{}},
		{"turned idle after the last unmapping: quiet later", false, at(200), at(100), at(220)},
		{"turned idle soon after an unmapping: gap after it", false, at(110), at(100), at(160)},
		{"never unmapped yet", false, at(5), time.Time{}, at(25)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := idleUnmapAt(tc.busy, tc.idleSince, tc.last, quiet, gap)
			if !got.Equal(tc.want) {
				t.Errorf("idleUnmapAt = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestActivity(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		calls     []bool // SetBusy at t0+0s, +1s, ...
		busy      bool
		idleSince time.Time
		woken     bool
	}{
		{"idle only: never turned idle", []bool{false, false}, false, time.Time{}, false},
		{"busy only", []bool{true, true}, true, time.Time{}, false},
		{"busy, then idle: turned at the first idle", []bool{true, true, false, false}, false, t0.Add(2 * time.Second), true},
		{"busy again", []bool{true, false, true}, true, t0.Add(time.Second), true},
		{"two spells: the last turn counts", []bool{true, false, true, false}, false, t0.Add(3 * time.Second), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newActivity()
			for i, busy := range tc.calls {
				a.set(busy, t0.Add(time.Duration(i)*time.Second))
			}
			busy, idleSince := a.state()
			if busy != tc.busy || !idleSince.Equal(tc.idleSince) {
				t.Errorf("state = %v, %v; want %v, %v", busy, idleSince, tc.busy, tc.idleSince)
			}
			woken := false
			select {
			case <-a.turned:
				woken = true
			default:
			}
			if woken != tc.woken {
				t.Errorf("a token for keepSmall: %v, want %v", woken, tc.woken)
			}
		})
	}
}
