package monitor

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	opsv1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/protocol"
)

// InvFailureCounted is the UpdateChannel's "every failure counted", as the
// product promises it (docs/updatechannel.md: status.failed, maxFailures;
// plan.Fold, plan.Fail, plan.Degraded):
//
//   - a slot whose node reported it Failed (its slot report, on its
//     NodeUpdate or its Node) in a version the API server wrote before the
//     channel's status version that ends the slot is counted in that same
//     version: status.failed lists the node at the slot's version, with a
//     reason (the controller frees the slot and records the failure in one
//     write);
//   - a slot that ends uncounted is explained within Limits.CountGrace:
//     its node's report ended it Succeeded or Released (a window's
//     deferral), the node runs the slot's version, or the controller said
//     why in a SlotReleased Event naming the node (a node gone before its
//     reboot, an invalid spec): never a slot that just disappears;
//   - while status.failed holds maxFailures failures at a version (those
//     of skipped nodes not counted), the channel grants no new slot at that
//     version but retries of those failed nodes and a failed wave's
//     rollback slots;
//   - a failure stays counted until the node's next success: it leaves
//     status.failed only when it no longer matters (plan.Prune: the
//     channel's target is another version, the node is no longer
//     selected or was deleted) or the node runs its version (a success),
//     as seen within Limits.CountGrace.
const InvFailureCounted = "every-failure-counted"

// defaultCountGrace is how long an uncounted slot end may wait for what
// explains it: the report, the Node's versions and the Event come on
// other watches than the channel's status.
const defaultCountGrace = 10 * time.Second

// SlotEnd is a slot seen leaving an UpdateChannel's status.updating (or
// replaced there by another slot of its node).
type SlotEnd struct {
	Channel string // namespace/name
	UID     types.UID
	Slot    opsv1.Slot
	At      time.Time
	// RV is the channel's resourceVersion that ended the slot.
	RV string
	// Counted: that version's status.failed lists the node at the slot's
	// version with a reason, for at least the slot's attempts.
	Counted bool
}

// SlotReportObs is a node's report of one channel's slot as the monitor
// last saw it, with the resourceVersion of the object (Node or
// NodeUpdate) it first came with.
type SlotReportObs struct {
	Report protocol.Report
	RV     string
}

// FailureGrant is a slot granted in a channel status version, with what
// that version counts of the failures at the slot's version.
type FailureGrant struct {
	Channel string
	Slot    opsv1.Slot
	At      time.Time
	// Failures are the nodes failed at the slot's version, skipped ones
	// left out; Max is spec.maxFailures (its default when unset).
	Failures []string
	Max      int
	// Retry: the node itself is failed at that version.
	Retry bool
}

// FailureDrop is a failure seen leaving an UpdateChannel's
// status.failed, with what that status version says of the channel.
type FailureDrop struct {
	Channel string
	Failure opsv1.Failure
	At      time.Time
	// Target is the channel's target in that version (spec.version, else
	// status.latestVersion); Selector its nodeSelector.
	Target   string
	Selector *metav1.LabelSelector
}

// failureDrops are the failures of prev (the channel's last version seen)
// that ch's version no longer lists for their node at their version.
func failureDrops(prev []opsv1.Failure, ch *opsv1.UpdateChannel, now time.Time) []FailureDrop {
	var out []FailureDrop
	target := ch.Spec.Version
	if target == "" {
		target = ch.Status.LatestVersion
	}
	for _, f := range prev {
		if slices.ContainsFunc(ch.Status.Failed, func(g opsv1.Failure) bool { return g.Node == f.Node && g.Version == f.Version }) {
			continue
		}
		out = append(out, FailureDrop{Channel: ch.Namespace + "/" + ch.Name, Failure: f, At: now, Target: target, Selector: ch.Spec.NodeSelector})
	}
	return out
}

// SlotReleasedEvent is a channel's SlotReleased Event as the monitor saw
// it (new, or its count grown).
type SlotReleasedEvent struct {
	Channel, Message string
	At               time.Time
}

// slotEnds are the slots of prev (the channel's last version seen) that
// ch's version no longer holds, each with whether ch counts it.
func slotEnds(prev []opsv1.Slot, ch *opsv1.UpdateChannel, now time.Time) []SlotEnd {
	var out []SlotEnd
	for _, p := range prev {
		if i := slices.IndexFunc(ch.Status.Updating, func(s opsv1.Slot) bool { return sameSlot(s, p) }); i >= 0 {
			continue
		}
		out = append(out, SlotEnd{Channel: ch.Namespace + "/" + ch.Name, UID: ch.UID, Slot: p, At: now, RV: ch.ResourceVersion,
			Counted: slices.ContainsFunc(ch.Status.Failed, func(f opsv1.Failure) bool {
				return f.Node == p.Node && f.Version == p.Version && f.Reason != "" && f.Attempts >= p.Attempt
			})})
	}
	return out
}

// sameSlot: one grant of one node (claim time, attempt, version), as
// protocol.Report.For matches a report to its slot.
func sameSlot(a, b opsv1.Slot) bool {
	return a.Node == b.Node && a.Version == b.Version && a.Attempt == b.Attempt && a.Since.Unix() == b.Since.Unix()
}

// failureGrants are the slots ch's version grants that prev did not hold
// (by node), with the failures that version counts at their version.
func failureGrants(prev []opsv1.Slot, ch *opsv1.UpdateChannel, now time.Time) []FailureGrant {
	var out []FailureGrant
	maxF := ch.Spec.MaxFailures
	if maxF <= 0 {
		maxF = opsv1.DefaultMaxFailures
	}
	skipped := map[string]bool{}
	for _, s := range ch.Status.Skipped {
		skipped[s.Node] = true
	}
	for _, s := range ch.Status.Updating {
		if s.Rollback || slices.ContainsFunc(prev, func(p opsv1.Slot) bool { return p.Node == s.Node }) {
			continue
		}
		g := FailureGrant{Channel: ch.Namespace + "/" + ch.Name, Slot: s, At: now, Max: maxF}
		for _, f := range ch.Status.Failed {
			if f.Version != s.Version {
				continue
			}
			if f.Node == s.Node {
				g.Retry = true
			}
			if !skipped[f.Node] {
				g.Failures = append(g.Failures, f.Node)
			}
		}
		out = append(out, g)
	}
	return out
}

// rvBefore reports whether resourceVersion a was written before b (both
// from one etcd: integers that grow); false when either is not one.
func rvBefore(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	return err1 == nil && err2 == nil && x < y
}

// FailureCounted is InvFailureCounted over s.SlotEnds (the slot ends not
// judged to the end yet), s.SlotReports, s.SlotReleases, the nodes'
// versions and s.FailureGrants.
func FailureCounted(s State, l Limits) ([]Finding, error) {
	l = l.withDefaults()
	var out []Finding
	for _, e := range s.SlotEnds {
		if e.Counted {
			continue
		}
		sl := e.Slot
		key := fmt.Sprintf("%s/%s@%s#%d/%d", e.Channel, sl.Node, sl.Version, sl.Attempt, sl.Since.Unix())
		objs := []string{"UpdateChannel/" + e.Channel, nodeKey(sl.Node), "NodeUpdate//" + sl.Node}
		r, ok := s.SlotReports[sl.Node][e.UID]
		of := ok && r.Report.For(sl)
		// A SlotReleased Event naming the node explains an end the
		// controller made without counting (a node gone, an agent
		// silent, a spec turned invalid: every slot freed, a Failed
		// report unfolded).
		released := slices.ContainsFunc(s.SlotReleases, func(ev SlotReleasedEvent) bool {
			return ev.Channel == e.Channel && strings.Contains(ev.Message, "node "+sl.Node+" ") &&
				!ev.At.Before(e.At.Add(-l.CountGrace)) && !ev.At.After(e.At.Add(l.CountGrace))
		})
		switch {
		case of && r.Report.Outcome == protocol.OutcomeFailed && rvBefore(r.RV, e.RV):
			if released || s.Now.Sub(e.At) < l.CountGrace {
				continue // its Event may be on its way
			}
			out = append(out, Finding{Invariant: InvFailureCounted, Key: key, Objects: objs,
				Message: fmt.Sprintf("channel %s ended node %s's slot at %s (attempt %d) without counting it in status.failed, though the node had reported it Failed (%s), and no SlotReleased Event named it within %s",
					e.Channel, sl.Node, sl.Version, sl.Attempt, r.Report.Reason, l.CountGrace)})
		case of && (r.Report.Outcome == protocol.OutcomeSucceeded || r.Report.Outcome == protocol.OutcomeReleased):
		case of && r.Report.Outcome == protocol.OutcomeFailed:
			// reported after the version that ended the slot: the end is
			// the controller's, judged below
			fallthrough
		default:
			if n, ok := s.Nodes[sl.Node]; ok && n.Version != "" && n.Version == sl.Version {
				continue // it reached the slot's version
			}
			if released {
				continue
			}
			if s.Now.Sub(e.At) < l.CountGrace {
				continue
			}
			out = append(out, Finding{Invariant: InvFailureCounted, Key: key, Objects: objs,
				Message: fmt.Sprintf("channel %s ended node %s's slot at %s (attempt %d, phase %s) with no failure counted, no report of the node ending it and no SlotReleased Event within %s: the node runs %q",
					e.Channel, sl.Node, sl.Version, sl.Attempt, sl.Phase, l.CountGrace, s.Nodes[sl.Node].Version)})
		}
	}
	for _, d := range s.FailureDrops {
		f := d.Failure
		n, known := s.Nodes[f.Node]
		switch {
		case d.Target != f.Version: // the target moved on
		case !known, !s.Deleted[f.Node].IsZero() && !s.Deleted[f.Node].Before(d.At.Add(-time.Minute)): // deleted (re-registered since)
		case !(ChannelObs{Selector: d.Selector}).selects(n.Labels): // no longer the channel's
		case n.Version == f.Version: // it reached the version: a success
		case s.Now.Sub(d.At) < l.CountGrace: // its success may be on its way
		default:
			out = append(out, Finding{Invariant: InvFailureCounted, Key: fmt.Sprintf("%s/drop/%s@%s#%d", d.Channel, f.Node, f.Version, f.Attempts),
				Objects: []string{"UpdateChannel/" + d.Channel, nodeKey(f.Node)},
				Message: fmt.Sprintf("channel %s dropped node %s's failure at %s (%s) from status.failed, though %s is still its target, the node still selected and it runs %q, not %s",
					d.Channel, f.Node, f.Version, f.Reason, f.Version, n.Version, f.Version)})
		}
	}
	for _, g := range s.FailureGrants {
		if g.Retry || len(g.Failures) < g.Max {
			continue
		}
		out = append(out, Finding{Invariant: InvFailureCounted, Key: fmt.Sprintf("%s/grant/%s@%s#%d/%d", g.Channel, g.Slot.Node, g.Slot.Version, g.Slot.Attempt, g.Slot.Since.Unix()),
			Objects: []string{"UpdateChannel/" + g.Channel, nodeKey(g.Slot.Node)},
			Message: fmt.Sprintf("channel %s granted node %s a slot at %s while %d nodes failed at it (%s), maxFailures %d",
				g.Channel, g.Slot.Node, g.Slot.Version, len(g.Failures), strings.Join(g.Failures, ", "), g.Max)})
	}
	return out, nil
}
