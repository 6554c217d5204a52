package agentmem

import (
	"testing"
	"time"
)

func TestReleaseAt(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	const delay, gap = time.Second, 10 * time.Second
	for _, tc := range []struct {
		name      string
		now, last time.Time
		want      time.Time
	}{
		{"never released: delay later", at(100), time.Time{}, at(101)},
		{"released long ago: delay later", at(100), at(50), at(101)},
		{"released just before: gap after that", at(100), at(95), at(105)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := releaseAt(tc.now, tc.last, delay, gap); !got.Equal(tc.want) {
				t.Errorf("releaseAt = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestHeapReleaser: requests while one is pending coalesce into it, and
// none is scheduled until the releaser is enabled.
func TestHeapReleaser(t *testing.T) {
	var scheduled []func()
	freed := 0
	r := &heapReleaser{free: func() { freed++ }, after: func(_ time.Duration, f func()) { scheduled = append(scheduled, f) }}
	now := time.Now()
	if at := r.request(now); !at.IsZero() || len(scheduled) != 0 {
		t.Fatalf("a release was scheduled before the releaser was enabled")
	}
	r.enable(Options{ReleaseDelay: time.Second, ReleaseGap: time.Hour})
	if at := r.request(now); !at.Equal(now.Add(time.Second)) {
		t.Fatalf("first request: release at %v, want a second later", at)
	}
	if at := r.request(now); !at.IsZero() {
		t.Errorf("a second request while one is pending scheduled another release")
	}
	scheduled[0]()
	if freed != 1 {
		t.Fatalf("freed %d times, want 1", freed)
	}
	after := time.Now()
	if at := r.request(after); at.Before(r.last.Add(time.Hour)) {
		t.Errorf("a request just after a release: release at %v, want no sooner than the gap after it", at)
	}
	if len(scheduled) != 2 {
		t.Errorf("%d releases scheduled, want 2", len(scheduled))
	}
}
