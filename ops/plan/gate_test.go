package plan

import (
	"testing"
	"time"

	"slipway.dev/slipway/ops/window"
)

func TestMayStartAndReboot(t *testing.T) {
	w, err := window.Parse(nil, "02:00", "04:00", "UTC") // every day 02:00-04:00 UTC
	if err != nil {
		t.Fatal(err)
	}
	day := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	drain := Settings{Window: w, RebootDelay: 5 * time.Second, Drain: Drain{Enabled: true}}
	drain.Drain.Timeout = 30 * time.Minute
	noDrain := Settings{Window: w, RebootDelay: 5 * time.Second}
	for _, c := range []struct {
		name          string
		s             Settings
		at            time.Duration // after midnight
		start, reboot bool
	}{
		{"no window: always", Settings{RebootDelay: time.Hour}, 10 * time.Hour, true, true},
		{"before the window", drain, time.Hour, false, false},
		{"window opens: room for drain and delay", drain, 2 * time.Hour, true, true},
		{"31 min left: room", drain, 3*time.Hour + 29*time.Minute, true, true},
		{"30 min left: not for 30 min + 5 s", drain, 3*time.Hour + 30*time.Minute, false, true},
		{"without drain 1 min left is room", noDrain, 3*time.Hour + 59*time.Minute, true, true},
		{"without drain 4 s left is not", noDrain, 3*time.Hour + 59*time.Minute + 56*time.Second, false, true},
		{"after the window", drain, 4 * time.Hour, false, false},
	} {
		now := day.Add(c.at)
		start, why := MayStart(c.s, now)
		if start != c.start || !start && why == "" {
			t.Errorf("%s: MayStart = %v (%s), want %v", c.name, start, why, c.start)
		}
		if reboot, why := MayReboot(c.s, now); reboot != c.reboot || !reboot && why == "" {
			t.Errorf("%s: MayReboot = %v (%s), want %v", c.name, reboot, why, c.reboot)
		}
	}
}
