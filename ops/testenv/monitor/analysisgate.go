package monitor

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	opsv1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/updateoperator"
)

// InvAnalysisGate is progressive delivery's rule: no slot is granted (an
// UpdateChannel's node given a slot; the update operator's node started)
// while the rollout's analysis failed, holds (it cannot be evaluated, a
// bake) or has a finished wave it has not passed yet.
const InvAnalysisGate = "analysis-gate"

// defaultGateGrace is how long after a start the update operator's fleet
// state may still be seen holding: the fleet state (a ConfigMap) and the
// Node arrive on two watches, in either order.
const defaultGateGrace = 2 * time.Second

// SlotGrant is a node given an UpdateChannel's slot (in the status version
// where it first appears in status.updating), with what that same status
// says of the channel's analysis: Hold is why it holds every slot ("":
// it does not).
type SlotGrant struct {
	Channel, Node string
	Hold          string
	At            time.Time
}

// channelHold is why ch's status says its analysis lets no slot go: the
// failed wave (status.analysis.failed, or the AnalysisFailed condition),
// the AnalysisHolding condition (it cannot be judged, a bake, a wave being
// judged), or a wave of finished nodes not passed yet. "": none.
func channelHold(ch *opsv1.UpdateChannel) string {
	st := ch.Status
	if a := st.Analysis; a != nil && a.Failed != nil {
		return fmt.Sprintf("status.analysis.failed: query %s on the wave %s: %s", a.Failed.Query, strings.Join(a.Failed.Nodes, ", "), a.Failed.Reason)
	}
	for _, t := range []string{opsv1.ConditionAnalysisFailed, opsv1.ConditionAnalysisHolding} {
		if c := meta.FindStatusCondition(st.Conditions, t); c != nil && c.Status == "True" {
			return fmt.Sprintf("condition %s (%s): %s", t, c.Reason, c.Message)
		}
	}
	if a := st.Analysis; a != nil && len(a.Wave) > 0 {
		return fmt.Sprintf("status.analysis.wave %s not passed yet", strings.Join(a.Wave, ", "))
	}
	return ""
}

// observeChannelGrants are the slots ch's version grants that prev (the
// slots of its last version seen; ok false: none seen) did not hold, but
// for rollback slots (spec.analysis.onFailure: rollback), which a failed
// analysis grants on purpose.
func observeChannelGrants(prev []string, ok bool, ch *opsv1.UpdateChannel, now time.Time) []SlotGrant {
	if !ok {
		return nil // its first version seen: slots granted before the monitor looked
	}
	var out []SlotGrant
	hold := ""
	for _, s := range ch.Status.Updating {
		if slices.Contains(prev, s.Node) {
			continue
		}
		if s.Rollback {
			continue // a failed wave's node going back: the failure's answer, not a step forward
		}
		if hold == "" {
			hold = channelHold(ch)
		}
		out = append(out, SlotGrant{Channel: ch.Namespace + "/" + ch.Name, Node: s.Node, Hold: hold, At: now})
	}
	return out
}

// FleetObs is one version of the update operator's fleet state (its
// ConfigMap) as the monitor saw it: Hold is why it lets no node start
// ("": none).
type FleetObs struct {
	Key  string // the ConfigMap's history key
	At   time.Time
	Hold string
}

// fleetHold is why the update operator's fleet state cm lets no node
// start: a failed analysis (analysisFailed), or a wave of finished nodes
// not passed yet (wave: it bakes, or waits for its evaluation). An
// unreadable state is said so.
func fleetHold(cm *corev1.ConfigMap) string {
	raw := cm.Data["fleet"]
	if raw == "" {
		return ""
	}
	var f updateoperator.Fleet
	if err := json.Unmarshal([]byte(raw), &f); err != nil {
		return "" // not the monitor's to judge: the controller says so itself
	}
	if f.AnalysisFailed != nil {
		return "analysisFailed: " + f.AnalysisFailed.Message()
	}
	if len(f.Wave) > 0 {
		r := fmt.Sprintf("the wave %s not passed yet", strings.Join(f.Wave, ", "))
		if !f.BakeUntil.IsZero() {
			r += ", baking until " + f.BakeUntil.UTC().Format(time.RFC3339Nano)
		}
		return r
	}
	return ""
}

// AnalysisGate: no slot is granted while the analysis says no. An
// UpdateChannel's new slot is judged by the status version that grants
// it; an update operator's start (ReleaseStart) by the fleet state seen
// last before it, unless a version seen within Limits.GateGrace after it
// lifted the hold (the two watches may deliver out of order). Starts
// newer than the grace wait for a later check (State.GateStarts keeps
// them).
func AnalysisGate(s State, l Limits) ([]Finding, error) {
	l = l.withDefaults()
	var out []Finding
	for _, g := range s.SlotGrants {
		if g.Hold == "" {
			continue
		}
		out = append(out, Finding{Invariant: InvAnalysisGate, Key: g.Channel + "/" + g.Node + "@" + g.At.UTC().Format(time.RFC3339Nano),
			Message: fmt.Sprintf("channel %s granted node %s a slot while its analysis holds: %s", g.Channel, g.Node, g.Hold),
			Objects: []string{"UpdateChannel/" + g.Channel, nodeKey(g.Node)}})
	}
	for _, st := range s.GateStarts {
		if s.Now.Sub(st.At) < l.GateGrace {
			continue
		}
		hold, lifted := "", false
		for _, f := range s.Fleet {
			switch {
			case !f.At.After(st.At):
				hold = f.Hold
			case f.At.Sub(st.At) <= l.GateGrace && f.Hold == "":
				lifted = true
			}
		}
		if hold == "" || lifted {
			continue
		}
		out = append(out, Finding{Invariant: InvAnalysisGate, Key: st.Node + "@" + st.At.UTC().Format(time.RFC3339Nano),
			Message: fmt.Sprintf("the update operator started node %s's update to %s while its analysis holds: %s", st.Node, st.Version, hold),
			Objects: []string{nodeKey(st.Node), s.Fleet[len(s.Fleet)-1].Key}})
	}
	return out, nil
}
