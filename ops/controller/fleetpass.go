package controller

import (
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"slipway.dev/slipway/ops/analysis"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/wallclock"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// fleetPass is one pass of the fleet view over a channel's status: what
// was read before the write (the resolved release, the stale slots, the
// channel's nodes, the checks of the nodes behind), applied to the latest
// status on every try of the optimistic write.
type fleetPass struct {
	s           plan.Settings
	generation  int64 // the spec generation s was resolved from
	retry       plan.Retry
	now         time.Time
	listedSlots string // the slot holders of the channel the nodes were read beside
	resolved    *v1.ResolvedRelease
	stale       map[string]staleSlot
	mine        []plan.Node
	others      map[string]string
	checks      map[string]*v1.SkippedNode
	// serverElsewhere: a server node of another channel holds a slot.
	serverElsewhere bool
	// reports are the nodes' reports (plan.Fold), of the nodes holding a slot or a permit.
	reports map[string]protocol.Reports
	// drained are this controller's drains done, whose slots become Rebooting.
	drained []drainRun
	// claims are the claim times of the slots this controller granted last, by node.
	claims map[string]time.Time
	// slowDrains are the nodes whose drain runs slowly: their Draining phase is written.
	slowDrains map[string]bool
	// fenced are the nodes whose slot was taken away and whose view still
	// shows it: no slot is granted while there is one (revoke.go).
	fenced []string
	// avail is what the budget reads of the channel's nodes (availability.go).
	avail []plan.Availability
	// analysis is the channel's resolved spec.analysis (nil: none) and
	// judged its evaluation for this pass (analysis.go).
	analysis *plan.Analysis
	judged   *plan.Judged
	// afterRollback is the analysis asked after a failed wave was rolled
	// back (nil: not asked in this pass; backout.go).
	afterRollback *analysis.Result
}

// apply updates c's status for this pass and says what changed.
func (p fleetPass) apply(c *v1.UpdateChannel) fleetResult {
	var r fleetResult
	if c.Generation != p.generation {
		// The spec changed since s was resolved (a newer channel came back
		// with a conflict): a status computed from the old spec must not be
		// written as the new one's. Resolve again.
		r.relist = true
		return r
	}
	st := &c.Status
	holders := slotHolders(c) // before the fold: the slots the nodes were read beside
	target := plan.Target(p.s, *st)
	if p.resolved != nil && target == p.resolved.Version {
		st.Resolved = p.resolved
	}
	before := *st.DeepCopy()
	r.folded = plan.Fold(st, c.UID, p.reports)
	asked := plan.HoldBackDraining(st, before, p.slowDrains)
	r.drained, r.drainGone = markDrained(st, p.drained)
	r.drainsAsked = notDrained(asked, r.drained) // a drain this pass marks done is not started again
	mine := stagingDone(p.mine, r.folded.Permits)
	r.recover(st, p.stale, p.now)
	plan.Prune(st, mine, target)
	// Permits before slots: a node that takes a slot in this pass stages
	// under its permit first, so its slot's Job only activates.
	r.staging = plan.GrantStaging(p.s, st, mine, target, p.now)
	// The bake starts at this write, not at the pass's start (the checks
	// before it may take a while).
	if p.analysis != nil {
		r.resumed = plan.Resume(st, c.Annotations[plan.ResumeAnnotation]) // lifts a failed analysis's halt once (backout.go)
	}
	r.analysis = plan.StepAnalysis(p.analysis, st, joinable(r.folded.Succeeded, before), target, p.judged, wallclock.Now(), c.Generation)
	plan.NotePrevious(st, before.Updating, r.analysis.Joined)
	p.backout(st, string(c.UID), before, &r, backoutHold(holders != p.listedSlots, len(p.fenced) > 0 || len(r.revoked) > 0))
	switch {
	case holders != p.listedSlots:
		// A slot changed hands since the nodes were read (a conflict
		// brought a status newer than the pass's, written by another
		// replica): the nodes read may show one that just finished at its
		// old version. Claim after reading them again.
		r.relist = true
		recount(st, mine, target)
	case r.analysis.Hold != "":
		// The analysis failed, bakes a wave or cannot be evaluated: no slot.
		recount(st, mine, target)
	case len(p.fenced) > 0 || len(r.revoked) > 0:
		// A slot taken away (now or earlier) may still be in its node's
		// view: its capacity is granted once the view dropped it.
		recount(st, mine, target)
	default:
		r.added = plan.AssignWith(p.s, st, mine, p.others, p.checks, target, p.retry, p.now,
			plan.Beside{ServerElsewhere: p.serverElsewhere, Down: plan.Names(plan.Unavailable(*st, p.avail))})
		plan.SpaceClaims(st, r.added, p.claims)
		startUpgrading(c.UID, st, r.added)
	}
	r.down = plan.Unavailable(*st, p.avail)
	r.capacityHeld = plan.SetCapacityHeld(p.s, st, r.down, p.now, c.Generation)
	r.conflict = plan.SetConflict(st, p.others, c.Generation)
	plan.SetInvalid(st, nil, c.Generation)
	plan.SetProgress(p.s, st, target, c.Generation)
	st.ObservedGeneration = c.Generation
	return r
}

// recount counts st's nodes again, keeping the skipped count of the last check.
func recount(st *v1.UpdateChannelStatus, mine []plan.Node, target string) {
	skipped := st.Counts.Skipped
	st.Counts = plan.Counts(mine, *st, target)
	st.Counts.Skipped = skipped
}

// fleetResult is what one pass of the fleet view changed, for its Events.
type fleetResult struct {
	added     []string
	staging   []string     // staging permits given
	recovered []v1.Failure // slots taken away as failures
	released  []string     // slots taken away without a failure: "node: why"
	conflict  bool         // the Conflict condition turned True or changed
	relist    bool
	folded    plan.Folded // the nodes' reports folded in
	// drained are the drains whose slots this pass marked Rebooting;
	// drainGone those whose slot went before.
	drained, drainGone []drainRun
	// drainsAsked are the slots whose node asked for its drain.
	drainsAsked []v1.Slot
	// revoked are the slots this pass took away (recovered or released).
	revoked []v1.Slot
	// down are the channel's nodes down without a slot; capacityHeld: the
	// CapacityHeld condition changed.
	down         []plan.Down
	capacityHeld bool
	// analysis is what the channel's analysis said in this pass.
	analysis plan.AnalysisStep
	// backout is what the rollback of a failed wave did; resumed: the
	// resume annotation lifted a failed analysis's halt (backout.go).
	backout plan.BackoutStep
	resumed bool
}

// recover takes the stale slots away: a node gone before its reboot loses
// its slot without a failure; any other stale slot fails.
func (r *fleetResult) recover(st *v1.UpdateChannelStatus, stale map[string]staleSlot, now time.Time) {
	for _, sl := range append([]v1.Slot(nil), st.Updating...) {
		v, ok := stale[sl.Node+"/"+fmt.Sprint(sl.Attempt)]
		switch {
		case !ok:
			continue
		case v.release:
			plan.Release(st, sl.Node)
			r.released = append(r.released, v.why)
		default:
			r.recovered = append(r.recovered, plan.Fail(st, sl.Node, sl.Version, v.why, now))
		}
		r.revoked = append(r.revoked, sl)
	}
}

// startUpgrading marks the slots just assigned Upgrading with their Job's
// name, which is known (node, version, channel UID, claim time, attempt):
// the node's agent then only creates the Job, and writes nothing to the
// channel until it reboots.
func startUpgrading(uid types.UID, st *v1.UpdateChannelStatus, added []string) {
	for _, n := range added {
		if i := plan.FindSlot(*st, n); i >= 0 {
			sl := &st.Updating[i]
			sl.Phase, sl.Job = plan.PhaseUpgrading, protocol.SlotJobName(uid, *sl)
		}
	}
}

// stagingDone marks the nodes that just gave their staging permit back
// (their report folded in this pass) as done staging, so that no permit
// goes to them again before the next list shows what they staged.
func stagingDone(nodes []plan.Node, gaveBack []string) []plan.Node {
	if len(gaveBack) == 0 {
		return nodes
	}
	out := slices.Clone(nodes)
	for i := range out {
		if slices.Contains(gaveBack, out[i].Name) {
			out[i].StagingDone = true
		}
	}
	return out
}
