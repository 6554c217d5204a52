package benchside

import (
	"testing"
	"time"
)

func TestPaceOf(t *testing.T) {
	start := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	at := func(ms ...int) []time.Time {
		var out []time.Time
		for _, m := range ms {
			out = append(out, start.Add(time.Duration(m)*time.Millisecond))
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		writes []time.Time
		end    time.Duration
		limit  int
		want   Pace
	}{
		{"none", nil, 3 * time.Second, 2, Pace{Seconds: 3, Limit: 2}},
		{"the second at the limit counts", at(100, 900, 1500), 2 * time.Second, 2, Pace{Writes: 3, Seconds: 2, AtLimit: 1, Limit: 2}},
		{"outside the wall left out", at(-1, 0, 2000, 2500), 2 * time.Second, 1, Pace{Writes: 1, Seconds: 2, AtLimit: 1, Limit: 1}},
		{"a part second's writes count, its second not", at(100, 1100, 2100, 2200), 2500 * time.Millisecond, 2, Pace{Writes: 4, Seconds: 2, AtLimit: 0, Limit: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PaceOf(tc.writes, start, start.Add(tc.end), tc.limit); got != tc.want {
				t.Errorf("PaceOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestControllerManagerQPS(t *testing.T) {
	for _, tc := range []struct {
		env     string
		want    int
		wantErr bool
	}{{"", 0, false}, {"100", 100, false}, {" 50 ", 50, false}, {"0", 0, true}, {"fast", 0, true}} {
		t.Setenv(EnvControllerManagerQPS, tc.env)
		got, err := ControllerManagerQPS()
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("%q: got %d, %v; want %d, error %v", tc.env, got, err, tc.want, tc.wantErr)
		}
	}
	if l := ControllerManagerLimit(0); l != 20 {
		t.Errorf("default: %d", l)
	}
	if l := ControllerManagerLimit(100); l != 100 {
		t.Errorf("100: %d", l)
	}
}
