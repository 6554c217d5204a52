package plan

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// Staging ahead: the nodes behind the target download and verify it into
// their system directory (without switching what boots) before their slot,
// at most PrestageLimit at a time. The Lease holder hands out the staging
// permits in status.staging in the same write that assigns slots (no write
// of its own); each node removes its own permit when it is done.

// PrestageAuto is Settings.Prestage when spec.prestage.concurrency is unset.
const PrestageAuto = -1

// PrestageShare is the part of the channel's nodes that stage at once by
// default: a mirror or uplink serves a quarter of the cluster at a time,
// not all of it. The default is never below twice the slots (PrestageLimit):
// a node stages once, about as long as its slot takes, so for staging to
// stay ahead the wave in the slots and the next one stage side by side.
const PrestageShare = 4

// stagePermitGrace is added to upgradeTimeout (the staging Job's deadline)
// before a permit whose node never reported is taken back.
const stagePermitGrace = 2 * time.Minute

// PrestageLimit is how many of nodes may stage at once:
// spec.prestage.concurrency, or when it is unset a quarter of them rounded
// up, but at least twice concurrency (and at most all of them); 0 is off.
func PrestageLimit(s Settings, nodes int) int {
	if s.Prestage != PrestageAuto {
		return s.Prestage
	}
	return min(nodes, max((nodes+PrestageShare-1)/PrestageShare, 2*s.Concurrency))
}

// FindPermit returns the index of node's staging permit in st.Staging, or -1.
func FindPermit(st v1.UpdateChannelStatus, node string) int {
	for i, p := range st.Staging {
		if p.Node == node {
			return i
		}
	}
	return -1
}

// GrantStaging updates st.Staging for one pass of the fleet view: it takes
// back the permits no longer needed (another target, a node gone, up to
// date, done, or silent past the staging Job's deadline), then gives new
// ones to the nodes behind, in slot order, up to PrestageLimit. Nothing new
// starts while the channel is paused or Degraded; the window does not
// matter (staging disrupts nothing). It returns the nodes it gave a permit.
func GrantStaging(s Settings, st *v1.UpdateChannelStatus, mine []Node, target string, now time.Time) []string {
	limit := PrestageLimit(s, len(mine))
	byName := make(map[string]Node, len(mine))
	for _, n := range mine {
		byName[n.Name] = n
	}
	kept := st.Staging[:0:0]
	for _, p := range st.Staging {
		n, ok := byName[p.Node]
		if ok && limit > 0 && p.Version == target && stageWanted(n, target) && now.Sub(p.Since.Time) <= s.UpgradeTimeout+stagePermitGrace {
			kept = append(kept, p)
		}
	}
	st.Staging = kept
	if limit == 0 || target == "" || s.Paused || Degraded(s, *st, target) {
		return nil
	}
	skipped := skippedSet(*st)
	var added []string
	for _, n := range Behind(*st, mine, target) {
		if len(st.Staging) >= limit {
			break
		}
		if skipped[n.Name] || !stageWanted(n, target) || FindPermit(*st, n.Name) >= 0 {
			continue
		}
		st.Staging = append(st.Staging, v1.StagePermit{Node: n.Name, Version: target, Since: metav1.NewTime(now)})
		added = append(added, n.Name)
	}
	return added
}

// stageWanted reports whether n still has target to stage.
func stageWanted(n Node, target string) bool {
	return n.Version != "" && n.Version != target && n.Prestaged != target && n.PrestageFailed != target && !n.StagingDone
}

// ReleasePermit removes node's staging permit and reports whether it held one.
func ReleasePermit(st *v1.UpdateChannelStatus, node string) bool {
	i := FindPermit(*st, node)
	if i < 0 {
		return false
	}
	st.Staging = append(st.Staging[:i:i], st.Staging[i+1:]...)
	return true
}
