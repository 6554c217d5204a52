package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/internal/answer"
	"slipway.dev/slipway/ops/internal/wallclock"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/process"
	"slipway.dev/slipway/ops/protocol"
)

// fleetCache is what the Lease holder remembers of a channel between syncs.
type fleetCache struct {
	// gaveBackSince is when gaveBack was last forgotten (fleetNodes).
	gaveBackSince time.Time
	// permitted are the staging permit holders at the last pass; gaveBack
	// the nodes whose permit went away since the nodes were listed (a node
	// gives its permit back after it reported its staging on its Node,
	// which the next list shows: no list of every node for each permit).
	permitted, gaveBack map[string]bool
	pollTried           time.Time
	// resolveFailed is the last failed resolution of the channel's
	// release (resolveOnce paces the next).
	resolveFailed resolveAttempt
	// staleChecked is when the slots' nodes and Jobs were last read.
	staleChecked time.Time
	// checks are the recent checks of nodes behind the target, by node.
	checks map[string]checked
	// heldBack is the server node (and why) that last held the channel's
	// servers back (its Event is recorded once per server and reason).
	heldBack string
	// revoked are the slots taken away whose nodes' views may still show them (revoke.go).
	revoked revocations
	// downLong are the nodes whose NodeDownTooLong Event was recorded, with the down spell's start.
	downLong map[string]time.Time
	// analysis is the channel's analysis client and last evaluation (analysis.go).
	analysis analysisCache
}

// fenceRecheck is how soon a pass that waits for a view to drop a slot
// taken away looks again when no view write queued it.
const fenceRecheck = 2 * time.Second

// pollRetry is the least time between two poll attempts (after a failure).
const pollRetry = 30 * time.Second

// syncFleet does the fleet-view work of a channel when this controller holds its
// Lease: validate, poll, recover stale slots, check the nodes behind,
// assign free slots, count. It returns when it wants to run again.
func (ctl *Controller) syncFleet(ctx context.Context, name string) (time.Duration, error) {
	if !ctl.leading(name) {
		return 0, nil
	}
	ch, err := ctl.channelNow(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	s, bad := plan.Resolve(ch.Spec)
	if bad != nil {
		return 0, ctl.markInvalid(ctx, ch, bad)
	}
	an, bad := plan.ResolveAnalysis(ch.Spec.Analysis)
	if bad != nil {
		return 0, ctl.markInvalid(ctx, ch, bad)
	}
	generation := ch.Generation
	fc := ctl.fleetCacheOf(name)
	mono := time.Now()        // this pass's local intervals, on the monotonic clock
	now := wallclock.At(mono) // the wall clock, that the status's times are compared with
	if plan.PollDue(s, ch.Status, now) && mono.Sub(fc.pollTried) >= pollRetry {
		fc.pollTried = mono
		if ch, err = ctl.poll(ctx, ch, s); err != nil {
			return 0, err
		}
	}
	resolved := ctl.resolveOnce(ctx, fc, ch, s, mono)
	snap := ctl.nodeSnapshot() // the nodes and their reports, read at one moment
	nodes := ctl.fleetNodes(s, fc, snap)
	mine, others := plan.Split(plan.Ref(ch, s), ctl.channelRefs(), fc.markGaveBack(ch, nodes))
	var stale map[string]staleSlot
	if mono.Sub(fc.staleChecked) >= ctl.opts.Resync { // slots go stale in minutes: no GETs on every change
		stale, fc.staleChecked = ctl.staleSlots(ctx, s, ch), mono
	}
	ctl.takeChecksAhead(fc, name)
	ctl.forgetChecks(fc)
	target := plan.Target(s, ch.Status)
	reports := ctl.reportsFor(ch, snap)
	folded := ch.Status.DeepCopy() // the slots this pass frees count as free for the checks
	plan.Fold(folded, ch.UID, reports)
	ctl.startDrains(ch, s, draining(*folded))                                   // now: a drain waits for no check and no write of this pass
	fenced := ctl.fenced(fc, ch.UID)                                            // the revoked slots whose views still show them
	drained, rebootHeld := ctl.permitReboots(ctx, ch, ctl.drainsDoneIn(ch.UID)) // a server's reboot asks the server gate again (serverstep.go)
	var gate serverGate
	if serverWaits(ch.Status, mine, target) || backoutServers(ch.Status, mine) {
		gate = ctl.serverGateFor(ctx, name, snap)
	}
	behind := len(plan.Behind(*folded, mine, target)) > 0
	judged := ctl.askAnalysis(ctx, fc, name, an, *folded, target, behind, now)
	p := fleetPass{s: s, analysis: an, judged: judged, generation: generation, retry: ctl.opts.Retry, now: now, listedSlots: slotHolders(ch), resolved: resolved, stale: stale, mine: mine, others: others,
		checks: ctl.checkBehind(ctx, fc, name, *folded, plan.Behind(*folded, mine, target), startable(s, *folded, mine, target, ctl.opts.Retry, now),
			plan.FreeSlots(s, *folded), s.Concurrency, target),
		serverElsewhere: gate.taken(), reports: reports, drained: drained,
		claims: ctl.lastClaims(), slowDrains: ctl.slowDrains(), fenced: fenced, avail: ctl.availability(nodeNames(mine)),
		afterRollback: ctl.askAfterRollback(ctx, fc, name, an, *folded, now)}
	var r fleetResult
	ch, err = ctl.updateStatus(ctx, name, func(c *v1.UpdateChannel) error {
		r = p.apply(c)
		return nil
	})
	if err != nil {
		mayHaveLanded(fc, r.revoked, err)
		return 0, err
	}
	fc.revoked.add(r.revoked) // before the views: their nodes' views go first
	ctl.endDrains(ctx, r.drained, r.drainGone)
	ctl.noteClaims(ch, r.added)
	ctl.setViews(ch, mine)                // what each node acts on: written on its Node (views.go)
	ctl.startDrains(ch, s, r.drainsAsked) // the nodes that asked for their drain (ctrldrain.go)
	fc.permitted = permitSet(ch)          // as written (or as read, when nothing changed)
	for _, n := range r.folded.Permits {  // given back: the next list shows its staging
		if fc.gaveBack == nil {
			fc.gaveBack = map[string]bool{}
		}
		fc.gaveBack[n] = true
	}
	ctl.fleetEvents(ch, r)
	ctl.analysisEvents(ch, r.analysis)
	ctl.backoutEvents(ch, r)
	ctl.heldBackEvent(ch, fc, gate)
	if !r.relist {
		ctl.downEvents(ch, fc, s, r.down, now)
	}
	if r.capacityHeld && len(r.down) > 0 {
		ctl.recorder.Eventf(ch, corev1.EventTypeNormal, "CapacityHeld", "%s down without a slot: they spend this channel's concurrency (%d) until they are back",
			describeDown(r.down), s.Concurrency)
	}
	ctl.recordVersions(name, mine)
	ctl.metrics.fleet.recordSkipped(name, skippedReasons(ch))
	if r.relist {
		return time.Millisecond, nil
	}
	next := ctl.nextFleetSync(s, ch, now)
	if rebootHeld {
		next = min(next, heldRecheck)
	}
	if d := plan.AnalysisNext(an, ch.Status.Analysis, behind, now); d > 0 {
		next = min(next, d)
	}
	if d := plan.RollbackNext(an, ch.Status.Analysis, now); d > 0 {
		next = min(next, d)
	}
	if r.resumed {
		next = min(next, analysisJoinedRecheck) // the analysis is asked afresh at once
	}
	if len(r.analysis.Joined) > 0 {
		next = min(next, analysisJoinedRecheck) // the new wave is asked at once
	}
	if at := plan.NextDownTooLong(r.down, s.NodeReadyTimeout, now); !at.IsZero() {
		next = min(next, wallclock.Until(at)+time.Second) // CapacityHeld's reason turns NodeDownTooLong then
	}
	if len(fenced) > 0 || len(r.revoked) > 0 {
		// The view write queues the next pass; this is in case it failed.
		next = min(next, fenceRecheck)
	}
	return next, nil
}

// mayHaveLanded fences the slots a status write took away (revoked) when
// the write got no answer (answer.Unanswered): it may have landed, and the
// next pass, reading the status without them, would otherwise grant their
// capacity while their nodes' views still show them (revoke.go). Had it
// not landed, the next pass reads the slots' nodes again (stale slots are
// otherwise read once per resync) and takes them away again; a slot it
// keeps holds the channel's new slots back until its view drops it: a
// wait, never one node too many down.
func mayHaveLanded(fc *fleetCache, revoked []v1.Slot, err error) {
	if !answer.Unanswered(err) {
		return
	}
	fc.revoked.add(revoked)
	fc.staleChecked = time.Time{}
}

// lastClaims are the claim times of the last slot this controller granted
// each node (plan.SpaceClaims).
func (ctl *Controller) lastClaims() map[string]time.Time {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	return maps.Clone(ctl.claims)
}

// noteClaims remembers the claim times of the slots just granted.
func (ctl *Controller) noteClaims(ch *v1.UpdateChannel, added []string) {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	if ctl.claims == nil {
		ctl.claims = map[string]time.Time{}
	}
	for _, n := range added {
		if i := plan.FindSlot(ch.Status, n); i >= 0 {
			ctl.claims[n] = ch.Status.Updating[i].Since.Time
		}
	}
}

func (ctl *Controller) fleetEvents(ch *v1.UpdateChannel, r fleetResult) {
	// An assigned slot has no Event of its own: the node's agent records
	// "Upgrading" as soon as it starts (a write saved per node).
	ctl.metrics.claimed.Add(float64(len(r.added)))
	for _, f := range r.recovered {
		ctl.metrics.failures.WithLabelValues(ch.Name, "stale").Inc()
		ctl.recorder.Eventf(ch, corev1.EventTypeWarning, "SlotRecovered", "freed the slot of node %s: %s", f.Node, f.Reason)
	}
	for _, why := range r.released {
		ctl.recorder.Event(ch, corev1.EventTypeWarning, "SlotReleased", why)
	}
	if r.conflict {
		if c := meta.FindStatusCondition(ch.Status.Conditions, plan.ConditionConflict); c != nil {
			ctl.log.Warn("nodes of this channel follow an earlier channel", "channel", ch.Name, "message", c.Message)
			ctl.recorder.Event(ch, corev1.EventTypeWarning, "Conflict", c.Message)
		}
	}
}

func (ctl *Controller) fleetCacheOf(name string) *fleetCache {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	fc := ctl.fleet[name]
	if fc == nil {
		fc = &fleetCache{}
		ctl.fleet[name] = fc
	}
	return fc
}

// markInvalid records an Invalid condition and an Event when the spec
// turned bad, and frees every slot: no rollout of an invalid channel goes
// on, so the nodes' agents uncordon (they see their slot gone).
// errSpecChanged stops a status write computed from an older spec than
// the channel now has.
var errSpecChanged = errors.New("the channel's spec changed")

func (ctl *Controller) markInvalid(ctx context.Context, ch *v1.UpdateChannel, bad *plan.Invalid) error {
	changed := false
	var freed []v1.Slot
	written, err := ctl.updateStatus(ctx, ch.Name, func(c *v1.UpdateChannel) error {
		changed, freed = false, nil
		if c.Generation != ch.Generation {
			return errSpecChanged // judged on an older spec: judge the new one
		}
		changed = plan.SetInvalid(&c.Status, bad, c.Generation)
		freed, c.Status.Updating = c.Status.Updating, nil
		c.Status.Counts.Updating = 0
		c.Status.ObservedGeneration = c.Generation
		return nil
	})
	if errors.Is(err, errSpecChanged) {
		return nil // the informer brings the new spec and another sync
	} else if err != nil {
		mayHaveLanded(ctl.fleetCacheOf(ch.Name), freed, err)
		return err
	}
	ctl.fleetCacheOf(ch.Name).revoked.add(freed)
	ctl.setViews(written, nil) // no node follows an invalid channel; its slots are gone
	if changed {
		ctl.log.Warn("channel spec is invalid; doing nothing for it", "channel", ch.Name, "reason", bad.Reason, "message", bad.Message)
		ctl.recorder.Event(ch, corev1.EventTypeWarning, "Invalid", bad.Message)
	}
	for _, sl := range freed {
		ctl.recorder.Eventf(ch, corev1.EventTypeWarning, "SlotReleased", "freed the slot of node %s (at %s, phase %s): the spec is invalid (%s); its agent uncordons it",
			sl.Node, sl.Version, sl.Phase, bad.Reason)
	}
	return nil
}

// fleetNodes reads the channel's nodes from snap, the controller's cache of
// every Node's metadata at one moment (nodeSnapshot), not from a list: the
// cache is at least as new as the reports this pass folds (read from the
// same snapshot), and an agent publishes its new versions in the write that
// reports its slot's end, so a node whose slot the fold frees shows its new
// version in the same read and the pass may hand its slot on at once. The
// nodes that gave their staging permit back are forgotten every resync (by
// then the cache shows what they staged).
func (ctl *Controller) fleetNodes(s plan.Settings, fc *fleetCache, snap map[string]*metav1.ObjectMeta) []plan.Node {
	if time.Since(fc.gaveBackSince) >= ctl.opts.Resync {
		fc.gaveBackSince, fc.gaveBack = time.Now(), nil
	}
	var out []plan.Node
	for _, n := range snap {
		if !s.Selector.Matches(labels.Set(n.Labels)) {
			continue
		}
		// trust: ops.node.versions
		out = append(out, plan.Node{Name: n.Name, UID: string(n.UID), Labels: n.Labels, Version: n.Annotations[protocol.AnnotationRootfsVersion],
			CordonedBy: drain.CordonedBy(n.Annotations), Prestaged: n.Annotations[protocol.AnnotationPrestagedVersion],
			PrestageFailed: n.Annotations[protocol.AnnotationPrestageFailedVersion]})
	}
	slices.SortFunc(out, func(x, y plan.Node) int { return strings.Compare(x.Name, y.Name) })
	return out
}

func slotHolders(ch *v1.UpdateChannel) string {
	names := slotNodesOf(ch)
	sort.Strings(names)
	return strings.Join(names, ",")
}

// markGaveBack notes the nodes whose staging permit went away since this
// controller's last pass wrote the permits (their agents gave them back) and
// returns nodes with StagingDone set for those noted since the nodes were listed.
func (fc *fleetCache) markGaveBack(ch *v1.UpdateChannel, nodes []plan.Node) []plan.Node {
	now := permitSet(ch)
	for n := range fc.permitted {
		if !now[n] {
			if fc.gaveBack == nil {
				fc.gaveBack = map[string]bool{}
			}
			fc.gaveBack[n] = true
		}
	}
	if len(fc.gaveBack) == 0 {
		return nodes
	}
	out := slices.Clone(nodes)
	for i := range out {
		out[i].StagingDone = fc.gaveBack[out[i].Name]
	}
	return out
}

func permitSet(ch *v1.UpdateChannel) map[string]bool {
	out := map[string]bool{}
	for _, p := range ch.Status.Staging {
		out[p.Node] = true
	}
	return out
}

// staleSlot is why a slot must be taken away, and whether without a failure.
type staleSlot struct {
	release bool
	why     string
}

// staleSlots GETs the node, its agent's heartbeat and the Job of every slot
// and returns, keyed by node/attempt, the slots that must be taken away.
func (ctl *Controller) staleSlots(ctx context.Context, s plan.Settings, ch *v1.UpdateChannel) map[string]staleSlot {
	out := map[string]staleSlot{}
	now := wallclock.Now() // slots are API times; heartbeats and NotReady spans are judged on the local clock (agentHeartbeat, notReady)
	for _, sl := range ch.Status.Updating {
		var sn plan.SlotNode
		n, err := ctl.kube.CoreV1().Nodes().Get(ctx, sl.Node, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			continue // cannot tell; look again next time
		default:
			sn = plan.SlotNode{Exists: true}
			// trust: ops.node.ready
			ready, since := process.NodeReady(n)
			sn.Ready = ready
			if !ready && !since.IsZero() {
				sn.NotReadyFor = ctl.notReady.read(sl.Node, since, time.Now())
			}
			if beat, err := ctl.agentHeartbeat(ctx, sl.Node); err == nil {
				sn.AgentKnown, sn.Agent = true, beat
			}
		}
		var sj plan.SlotJob
		if j := ctl.slotJob(ctx, sl); j != nil {
			sj.Exists = true
			_, sj.Failed, sj.Reason, sj.FinishedAt = protocol.JobOutcome(j)
		}
		key := sl.Node + "/" + fmt.Sprint(sl.Attempt)
		if gone, why := plan.Abandoned(sl, sn, ctl.agentTTL(), now); gone {
			out[key] = staleSlot{release: true, why: why}
		} else if stale, why := plan.Stale(s, sl, sn, sj, now); stale {
			out[key] = staleSlot{why: why}
		}
	}
	return out
}

// slotJob is the Job of slot sl: its Pod (the slot's work runs in a Pod
// of its own, as the Job it stands for), or a Job of that name from an
// agent before that; nil when there is neither. A Pod or Job of that name
// not bound to the slot's node is no work of the slot's: its outcome is
// not the node's.
func (ctl *Controller) slotJob(ctx context.Context, sl v1.Slot) *batchv1.Job {
	if sl.Job == "" {
		return nil
	}
	if p, err := ctl.kube.CoreV1().Pods(ctl.opts.Namespace).Get(ctx, sl.Job, metav1.GetOptions{}); err == nil && protocol.SlotPodOfNode(p, sl.Node) {
		return protocol.JobOfSlotPod(p)
	}
	if j, err := ctl.kube.BatchV1().Jobs(ctl.opts.Namespace).Get(ctx, sl.Job, metav1.GetOptions{}); err == nil && protocol.JobOfNode(j, sl.Node) {
		return j
	}
	return nil
}

func (ctl *Controller) recordVersions(channel string, nodes []plan.Node) {
	counts := map[string]int{}
	for _, n := range nodes {
		counts[n.Version]++
	}
	ctl.metrics.nodes.DeletePartialMatch(map[string]string{"channel": channel})
	for v, c := range counts {
		ctl.metrics.nodes.WithLabelValues(channel, v).Set(float64(c))
	}
}

// nextFleetSync is when the fleet view must look again without any event:
// the next poll, the window opening, a backoff ending, or the resync.
func (ctl *Controller) nextFleetSync(s plan.Settings, ch *v1.UpdateChannel, now time.Time) time.Duration {
	next := ctl.opts.Resync
	consider := func(t time.Time) {
		if d := t.Sub(now); !t.IsZero() && d > 0 && d < next {
			next = d
		}
	}
	consider(plan.NextPoll(s, ch.Status, now).Add(time.Millisecond))
	consider(s.Window.Next(now))
	for _, f := range ch.Status.Failed {
		consider(f.At.Add(ctl.opts.Retry.Backoff(f.Attempts)))
	}
	return next
}

func skippedReasons(ch *v1.UpdateChannel) []string {
	out := make([]string, 0, len(ch.Status.Skipped))
	for _, s := range ch.Status.Skipped {
		out = append(out, s.Reason)
	}
	return out
}

// startable names the nodes that may take a slot now, health aside.
func startable(s plan.Settings, st v1.UpdateChannelStatus, mine []plan.Node, target string, retry plan.Retry, now time.Time) map[string]bool {
	out := map[string]bool{}
	for _, n := range plan.Candidates(s, st, mine, target, retry, now) {
		out[n.Name] = true
	}
	return out
}
