package window

import (
	"testing"
	"time"
)

// TestDaylightSavingDays: a window on a day the clocks change opens for its
// real length. Before, a window inside the spring gap never opened, and
// one across the autumn overlap opened twice.
func TestDaylightSavingDays(t *testing.T) {
	utc := func(s string) time.Time { return at(t, s, "UTC") }
	for _, tc := range []struct {
		name           string
		days           []string
		start, end, tz string
		when           string // UTC
		open           bool
		remaining      time.Duration
	}{
		// Europe/Berlin 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00 UTC).
		{"Berlin spring, start in the gap: opens when the clock jumps", []string{"sun"}, "02:30", "04:30", "Europe/Berlin", "2026-03-29 01:00", true, 2 * time.Hour},
		{"Berlin spring, before the jump", []string{"sun"}, "02:30", "04:30", "Europe/Berlin", "2026-03-29 00:59", false, 0},
		{"Berlin spring, two real hours later it closes", []string{"sun"}, "02:30", "04:30", "Europe/Berlin", "2026-03-29 03:00", false, 0},
		{"Berlin spring, a window wholly in the gap still opens for an hour", []string{"sun"}, "02:00", "03:00", "Europe/Berlin", "2026-03-29 01:30", true, 30 * time.Minute},
		{"Berlin spring, whole day lasts 23 hours", []string{"sun"}, "00:00", "00:00", "Europe/Berlin", "2026-03-28 23:00", true, 23 * time.Hour},
		{"Berlin the day before, as usual", nil, "02:30", "04:30", "Europe/Berlin", "2026-03-28 01:30", true, 2 * time.Hour},
		// Europe/Berlin 2026-10-25: 03:00 CEST falls back to 02:00 CET (01:00 UTC); 02:30 happens twice.
		{"Berlin autumn, opens at the first 02:30", []string{"sun"}, "02:30", "03:30", "Europe/Berlin", "2026-10-25 00:30", true, time.Hour},
		{"Berlin autumn, closed at the second 02:30 + 1h", []string{"sun"}, "02:30", "03:30", "Europe/Berlin", "2026-10-25 01:30", false, 0},
		// America/New_York 2026-11-01: 02:00 EDT falls back to 01:00 EST (06:00 UTC); 01:30 happens twice.
		{"New York autumn, opens at the first 01:30 (EDT)", []string{"sun"}, "01:30", "02:30", "America/New_York", "2026-11-01 05:30", true, time.Hour},
		{"New York autumn, one real hour later it is closed", []string{"sun"}, "01:30", "02:30", "America/New_York", "2026-11-01 06:30", false, 0},
		{"New York autumn, the second 01:59 (EST) is closed", []string{"sun"}, "01:30", "02:30", "America/New_York", "2026-11-01 06:59", false, 0},
		// Whole days that touch count as one opening.
		{"Mon and Tue whole days: 48 h from Monday 00:00", []string{"mon", "tue"}, "00:00", "00:00", "UTC", "2026-11-23 00:00", true, 48 * time.Hour},
		{"crossing midnight into a window of the next day", []string{"mon", "tue"}, "22:00", "02:00", "UTC", "2026-11-24 01:00", true, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := Parse(tc.days, tc.start, tc.end, tc.tz)
			if err != nil {
				t.Fatal(err)
			}
			when := utc(tc.when)
			if got := w.Contains(when); got != tc.open {
				t.Errorf("Contains(%s) = %v, want %v", when, got, tc.open)
			}
			if got := w.Remaining(when); got != tc.remaining {
				t.Errorf("Remaining(%s) = %s, want %s", when, got, tc.remaining)
			}
			if next := w.Next(when); !w.Contains(next) || next.Before(when) {
				t.Errorf("Next(%s) = %s is not an open instant at or after it", when, next)
			}
		})
	}
}

func TestNextOnDaylightSavingDays(t *testing.T) {
	for _, tc := range []struct {
		name, tz, start, end, from, want string // from, want: UTC
	}{
		{"Berlin spring gap: opens at the jump", "Europe/Berlin", "02:30", "04:30", "2026-03-28 12:00", "2026-03-29 01:00"},
		{"New York overlap: the first 01:30", "America/New_York", "01:30", "02:30", "2026-10-31 12:00", "2026-11-01 05:30"},
	} {
		w, err := Parse([]string{"sun"}, tc.start, tc.end, tc.tz)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := w.Next(at(t, tc.from, "UTC")), at(t, tc.want, "UTC"); !got.Equal(want) {
			t.Errorf("%s: Next = %s, want %s", tc.name, got.UTC(), want)
		}
	}
}
