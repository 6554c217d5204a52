package plan

import (
	"testing"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

func TestNewest(t *testing.T) {
	slot := func(attempt int, phase, job string) v1.Slot {
		return v1.Slot{Node: "n1", Version: "v2", Attempt: attempt, Phase: phase, Job: job}
	}
	for _, c := range []struct {
		name        string
		seen, wrote v1.Slot
		want        v1.Slot
	}{
		{"cache lags behind our write", slot(1, PhasePending, ""), slot(1, PhaseUpgrading, "j1"), slot(1, PhaseUpgrading, "j1")},
		{"cache caught up", slot(1, PhaseRebooting, "j1"), slot(1, PhaseUpgrading, "j1"), slot(1, PhaseRebooting, "j1")},
		{"same phase", slot(1, PhaseUpgrading, "j1"), slot(1, PhaseUpgrading, "j1"), slot(1, PhaseUpgrading, "j1")},
		{"another attempt is a new slot", slot(2, PhasePending, ""), slot(1, PhaseRebooting, "j1"), slot(2, PhasePending, "")},
		{"another version is a new slot", v1.Slot{Node: "n1", Version: "v3", Attempt: 1}, slot(1, PhaseRebooting, "j1"), v1.Slot{Node: "n1", Version: "v3", Attempt: 1}},
		{"nothing written yet", slot(1, PhasePending, ""), v1.Slot{}, slot(1, PhasePending, "")},
	} {
		if got := Newest(c.seen, c.wrote); got != c.want {
			t.Errorf("%s: Newest = %+v, want %+v", c.name, got, c.want)
		}
	}
}
