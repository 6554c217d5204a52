package upgrade

import (
	"errors"
	"fmt"
	"testing"

	"slipway.dev/slipway/upgrade/layout"
)

func TestDecide(t *testing.T) {
	sums := map[string]string{"rootfs": "aa"}
	good := &Marker{Release: "v2", Artifacts: map[string]string{"rootfs": "aa"}}
	otherSum := &Marker{Release: "v2", Artifacts: map[string]string{"rootfs": "bb"}}
	old := &Marker{Release: "v1", Artifacts: map[string]string{"rootfs": "cc"}}
	for _, tc := range []struct {
		name string
		c    layout.Component
		st   State
		want Action
	}{
		{"first install", layout.Rootfs, State{Target: "v2"}, ActionStage},
		{"current by name, no marker (k3os-installed)", layout.Rootfs, State{Current: "v2", Target: "v2", TargetPresent: true}, ActionCurrent},
		{"current link dangles", layout.Rootfs, State{Current: "v2", Target: "v2"}, ActionStage},
		{"complete copy installed", layout.Rootfs, State{Current: "v1", Target: "v2", TargetMarker: good, TargetPresent: true}, ActionReuse},
		{"incomplete copy (no marker)", layout.Rootfs, State{Current: "v1", Target: "v2"}, ActionStage},
		{"copy from a rebuilt release", layout.Kernel, State{Current: "k1", Target: "k2", TargetMarker: otherSum}, ActionStage},
		{"k3s current from this release", layout.K3s, State{Current: "k3s2", CurrentMarker: good}, ActionCurrent},
		{"k3s current from another release", layout.K3s, State{Current: "k3s1", CurrentMarker: old}, ActionStage},
		{"k3s installed, not current", layout.K3s, State{Current: "k3s1", CurrentMarker: old, Target: "k3s2", TargetMarker: good}, ActionReuse},
		{"k3s without markers", layout.K3s, State{Current: "k3s2"}, ActionStage},
	} {
		if got := Decide(tc.c, "v2", tc.st, sums); got != tc.want {
			t.Errorf("%s: Decide = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestSpaceNeeded(t *testing.T) {
	for _, tc := range []struct {
		rootfs int64
		other  []int64
		want   int64
	}{
		{0, nil, SpaceMargin},
		{-1, []int64{-1}, SpaceMargin},
		{100, []int64{10, 20}, SpaceMargin + 300 + 30},
	} {
		if got := SpaceNeeded(tc.rootfs, tc.other...); got != tc.want {
			t.Errorf("SpaceNeeded(%d, %v) = %d, want %d", tc.rootfs, tc.other, got, tc.want)
		}
	}
}

func TestExitCode(t *testing.T) {
	for err, want := range map[error]int{
		nil: ExitOK, errors.New("x"): ExitFailure,
		fmt.Errorf("a: %w", ErrVerify): ExitVerify, fmt.Errorf("a: %w", ErrLocked): ExitLocked,
		fmt.Errorf("a: %w", ErrNotFound): ExitNotFound, fmt.Errorf("a: %w", ErrNoSpace): ExitNoSpace,
		fmt.Errorf("a: %w", ErrReadOnly): ExitReadOnly, fmt.Errorf("a: %w", ErrNoRollback): ExitNoRollback,
	} {
		if got := ExitCode(err); got != want {
			t.Errorf("ExitCode(%v) = %d, want %d", err, got, want)
		}
	}
}
