package plan

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

func TestNewest(t *testing.T) {
	slot := func(attempt int, phase, job string) v1.Slot {
		return v1.Slot{Node: "n1", Version: "v2", Attempt: attempt, Phase: phase, Job: job}
	}
	regranted := slot(1, PhaseUpgrading, "j2")
	regranted.Since = metav1.Unix(1_700_000_000, 0)
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
		// Issue 21 item 4: a slot given back without a failure and granted
		// again for the same version and attempt is a new slot.
		{"a later grant of the same version and attempt is a new slot", regranted, slot(1, PhaseRebooting, "j1"), regranted},
	} {
		if got := Newest(c.seen, c.wrote); got != c.want {
			t.Errorf("%s: Newest = %+v, want %+v", c.name, got, c.want)
		}
	}
}
