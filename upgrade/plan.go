package upgrade

import (
	"slipway.dev/slipway/upgrade/layout"
)

// Action is what an upgrade does with one component.
type Action string

// The actions, in the words of the upgrade's report.
const (
	ActionCurrent  Action = "current"  // already at the target: nothing to do
	ActionReuse    Action = "reuse"    // a complete copy of the target is installed: relink only
	ActionStage    Action = "stage"    // download, verify, extract, swap
	ActionRollback Action = "rollback" // current and previous exchanged
)

// State is what the system directory holds for one component, as read
// before planning.
type State struct {
	Current string // version `current` points at, "" if none
	Target  string // version to install; "" when only the artifact tells (k3s)
	// TargetPresent: the Target folder exists (a `current` link may dangle).
	TargetPresent bool
	// TargetMarker is the marker of the installed Target folder, nil when the
	// folder or its marker is missing (e.g. left incomplete by a crash).
	TargetMarker *Marker
	// CurrentMarker is the marker of the current folder (k3s: tells which
	// release installed it).
	CurrentMarker *Marker
}

// Decide picks the action for one component of release version, whose
// artifacts have the digests sums (only the ones the component comes from).
// A folder counts as complete only with a marker that names the same
// release and digests; k3os-installed folders have no marker, so the
// current rootfs or kernel is recognised by name alone.
func Decide(c layout.Component, release string, st State, sums map[string]string) Action {
	if c == layout.K3s {
		if st.CurrentMarker.matches(release, sums) {
			return ActionCurrent
		}
		if st.Target != "" && st.TargetMarker.matches(release, sums) {
			return ActionReuse
		}
		return ActionStage
	}
	if st.Target != "" && st.Current == st.Target && st.TargetPresent {
		return ActionCurrent
	}
	if st.TargetMarker.matches(release, sums) {
		return ActionReuse
	}
	return ActionStage
}

// SpaceNeeded estimates the bytes staging takes: downloads of unknown size
// count as zero, the rootfs tarball expands by RootfsExpansion, and a fixed
// margin is kept free.
func SpaceNeeded(rootfsSize int64, otherSizes ...int64) int64 {
	need := int64(SpaceMargin)
	if rootfsSize > 0 {
		need += rootfsSize * RootfsExpansion
	}
	for _, s := range otherSizes {
		if s > 0 {
			need += s
		}
	}
	return need
}

// Free-space rule of SpaceNeeded.
const (
	RootfsExpansion = 3        // a gzipped rootfs unpacks to about this many times its size
	SpaceMargin     = 16 << 20 // bytes left free for logs and the filesystem itself
)
