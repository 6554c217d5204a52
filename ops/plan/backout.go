package plan

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/analysis"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// The rollback of a failed wave (spec.analysis.onFailure: rollback): the
// wave's nodes go back to the version they ran before it, each in a slot
// of its own (Slot.Rollback) that the node's agent carries out as it does
// an upgrade: a Job (`ops rollback`, the swap back to previous), the
// drain, the reboot and its confirmation. The halt stays: no node moves
// forward. Once every node is back (or reported), the analysis is asked
// again and says whether the rollback cured the workloads.

// States of one node of a rolled back wave (status.analysis.rollback.nodes[].state).
const (
	NodeRollbackPending = "Pending"     // waits for a slot
	NodeRollbackRunning = "RollingBack" // holds its rollback slot
	NodeRollbackDone    = "RolledBack"  // back at its previous version
	NodeRollbackFailed  = "Failed"      // could not be rolled back: the message says why
)

// States of a wave's rollback (status.analysis.rollback.state).
const (
	WaveRollingBack = "RollingBack" // nodes still to go back
	WaveRolledBack  = "RolledBack"  // every node back or reported; the analysis not passed yet
	WaveCured       = "Cured"       // the analysis passed after the rollback
	WaveNotCured    = "NotCured"    // the analysis still fails after the rollback
)

// BackoutPass is what one pass of the fleet view knows for the rollback.
type BackoutPass struct {
	// Nodes are the channel's nodes, by name.
	Nodes map[string]Node
	// Succeeded are the rollback slots that ended well in this pass;
	// Failed those that failed (node: reason) and Released those given
	// back unfailed (the window), by node.
	Succeeded []string
	Failed    map[string]string
	Released  []string
	// Down are the channel's nodes down without a slot (they spend
	// concurrency, budget.go); ServerElsewhere: a server node of another
	// channel holds a slot (one server at a time).
	Down            []string
	ServerElsewhere bool
	// Hold, when set, is why no rollback slot is granted in this pass (a
	// slot changed hands since the nodes were read, a slot taken away may
	// still be in its node's view); the outcomes are folded in all the same.
	Hold string
}

// BackoutStep is what the rollback did in one pass, for Events and metrics.
type BackoutStep struct {
	Started  bool               // the rollback began in this pass
	Granted  []string           // rollback slots granted
	Ended    []v1.NodeRollback  // nodes whose rollback ended (RolledBack or Failed)
	Finished bool               // every node is back or reported, since this pass
	Judged   *v1.WaveRollback   // the analysis after the rollback was judged in this pass (its record)
	Wait     string             // why no rollback slot was granted ("" when none waits)
	Slots    map[string]v1.Slot // the rollback slots held after this pass, by node
}

// RollbackNodes are the nodes holding a rollback slot in st, by node.
func RollbackNodes(st v1.UpdateChannelStatus) map[string]bool {
	out := map[string]bool{}
	for _, sl := range st.Updating {
		if sl.Rollback {
			out[sl.Node] = true
		}
	}
	return out
}

// NotePrevious records, for the nodes that joined the wave in this pass,
// the version they ran before (their slot's From, before the fold freed
// it): what a rollback of the wave returns them to.
func NotePrevious(st *v1.UpdateChannelStatus, before []v1.Slot, joined []string) {
	as := st.Analysis
	if as == nil {
		return
	}
	for _, n := range joined {
		i := slices.IndexFunc(before, func(s v1.Slot) bool { return s.Node == n })
		if i < 0 || before[i].From == "" {
			continue
		}
		as.Previous = slices.DeleteFunc(as.Previous, func(p v1.NodeVersion) bool { return p.Node == n })
		as.Previous = append(as.Previous, v1.NodeVersion{Node: n, Version: before[i].From})
	}
}

// StepBackout rolls back the failed wave of st, pure: it starts the
// rollback record when a wave failed and the channel asks for rollbacks
// (a == nil or onFailure halt: nothing), folds in what the rollback slots
// did in this pass, and grants the next rollback slots: in the wave's
// order, within concurrency beside the nodes down, one server at a time
// (none while a server of another channel holds a slot), never while the
// channel is paused or outside its window. A node whose previous version
// is not known is reported Failed at once; one already back (it runs its
// previous version) is RolledBack without a slot.
func StepBackout(s Settings, a *Analysis, st *v1.UpdateChannelStatus, p BackoutPass, now time.Time) BackoutStep {
	var step BackoutStep
	as := st.Analysis
	if a == nil || !a.Rollback || as == nil || as.Failed == nil {
		return step
	}
	rb := as.Rollback
	if rb == nil || rb.Version != as.Failed.Version {
		rb = &v1.WaveRollback{Version: as.Failed.Version, State: WaveRollingBack}
		for _, n := range as.Failed.Nodes {
			nr := v1.NodeRollback{Node: n, From: as.Failed.Version, To: previousOf(as.Previous, n), State: NodeRollbackPending, At: metav1.NewTime(now)}
			if nr.To == "" {
				nr.State = NodeRollbackFailed
				nr.Message = "the version it ran before the wave is not recorded (it joined the wave before its slot recorded it): roll it back by hand (slipway ops rollback)"
				step.Ended = append(step.Ended, nr)
			}
			rb.Nodes = append(rb.Nodes, nr)
		}
		as.Rollback, step.Started = rb, true
	}
	failed := p.Failed
	for i := range rb.Nodes {
		nr := &rb.Nodes[i]
		if nr.State != NodeRollbackRunning {
			continue
		}
		held := FindSlot(*st, nr.Node) >= 0 && st.Updating[FindSlot(*st, nr.Node)].Rollback
		switch {
		case slices.Contains(p.Succeeded, nr.Node):
			nr.State, nr.Message = NodeRollbackDone, "runs "+nr.To+" again"
			if n, ok := p.Nodes[nr.Node]; ok && n.Version != "" {
				nr.Message = "runs " + n.Version + " again"
			}
		case failed[nr.Node] != "":
			nr.State, nr.Message = NodeRollbackFailed, failed[nr.Node]
		case slices.Contains(p.Released, nr.Node):
			nr.State, nr.Message = NodeRollbackPending, "its slot was given back (the window): it goes back in a later slot"
		case !held:
			nr.State, nr.Message = NodeRollbackFailed, "its rollback slot ended without a result (see status.failed and the channel's Events)"
		default:
			continue
		}
		nr.At = metav1.NewTime(now)
		if nr.State != NodeRollbackPending {
			step.Ended = append(step.Ended, *nr)
		}
	}
	var ended []v1.NodeRollback
	step.Granted, ended, step.Wait = grantBackout(s, st, rb, p, now)
	step.Ended = append(step.Ended, ended...)
	rb.RolledBack = 0
	open := false
	for _, nr := range rb.Nodes {
		switch nr.State {
		case NodeRollbackDone:
			rb.RolledBack++
		case NodeRollbackPending, NodeRollbackRunning:
			open = true
		}
	}
	if !open && rb.Finished == nil {
		rb.State, rb.Finished, step.Finished = WaveRolledBack, &metav1.Time{Time: now}, true
	}
	return step
}

// grantBackout grants the rollback slots that fit now, ends the pending
// nodes that need none (gone, or back already), and says why the others
// wait.
func grantBackout(s Settings, st *v1.UpdateChannelStatus, rb *v1.WaveRollback, p BackoutPass, now time.Time) (granted []string, ended []v1.NodeRollback, wait string) {
	pending := false
	for _, nr := range rb.Nodes {
		pending = pending || nr.State == NodeRollbackPending
	}
	if !pending {
		return nil, nil, ""
	}
	if p.Hold != "" {
		return nil, nil, p.Hold
	}
	if s.Paused {
		return nil, nil, "the channel is paused"
	}
	if ok, why := MayStart(s, now); !ok {
		return nil, nil, why
	}
	servers := p.ServerElsewhere
	for _, sl := range st.Updating {
		servers = servers || Server(p.Nodes[sl.Node])
	}
	for i := range rb.Nodes {
		nr := &rb.Nodes[i]
		if nr.State != NodeRollbackPending {
			continue
		}
		n, ok := p.Nodes[nr.Node]
		switch {
		case !ok:
			nr.State, nr.Message, nr.At = NodeRollbackFailed, "the node is gone (or no longer selected by the channel)", metav1.NewTime(now)
			ended = append(ended, *nr)
			continue
		case n.Version == nr.To:
			nr.State, nr.Message, nr.At = NodeRollbackDone, "runs "+nr.To+" already", metav1.NewTime(now)
			ended = append(ended, *nr)
			continue
		case FindSlot(*st, nr.Node) >= 0:
			wait = "node " + nr.Node + " still holds a slot"
			continue
		case slices.Contains(p.Down, nr.Node):
			wait = "node " + nr.Node + " is down"
			continue
		}
		others := len(p.Down)
		if FreeSlotsBeside(s, *st, others) == 0 {
			if wait == "" {
				wait = fmt.Sprintf("every slot is held (concurrency %d)", s.Concurrency)
			}
			break
		}
		if Server(n) {
			if servers {
				wait = "one server at a time: node " + nr.Node + " waits for the server slot"
				continue
			}
			servers = true
		}
		st.Updating = append(st.Updating, v1.Slot{Node: nr.Node, Version: nr.To, From: nr.From, Rollback: true, Attempt: 1,
			Phase: PhasePending, Since: metav1.NewTime(now)})
		nr.State, nr.Message, nr.At = NodeRollbackRunning, "rolls back from "+nr.From+" to "+nr.To, metav1.NewTime(now)
		granted = append(granted, nr.Node)
	}
	return granted, ended, wait
}

func previousOf(prev []v1.NodeVersion, node string) string {
	for _, p := range prev {
		if p.Node == node {
			return p.Version
		}
	}
	return ""
}

// RollbackWave is the wave the analysis after a rollback judges ($nodes):
// the nodes rolled back.
func RollbackWave(rb *v1.WaveRollback) []string {
	var out []string
	for _, nr := range rb.Nodes {
		if nr.State == NodeRollbackDone {
			out = append(out, nr.Node)
		}
	}
	return out
}

// RollbackJudgeDue reports whether the analysis after the rollback is to
// be asked now: the rollback finished at least a bake (at least an
// interval) ago, it has not passed yet, and its last asking is an
// interval old.
func RollbackJudgeDue(a *Analysis, as *v1.AnalysisStatus, now time.Time) bool {
	if a == nil || as == nil || as.Failed == nil || as.Rollback == nil {
		return false
	}
	rb := as.Rollback
	if rb.Finished == nil || rb.State == WaveCured {
		return false
	}
	if now.Before(rb.Finished.Add(max(a.Bake, a.Interval))) {
		return false
	}
	return rb.JudgedAt == nil || !now.Before(rb.JudgedAt.Add(a.Interval))
}

// RollbackNext is how soon the rollback wants the next pass: when the
// analysis after it is due (0: not needed).
func RollbackNext(a *Analysis, as *v1.AnalysisStatus, now time.Time) time.Duration {
	if a == nil || as == nil || as.Failed == nil || as.Rollback == nil || as.Rollback.Finished == nil || as.Rollback.State == WaveCured {
		return 0
	}
	at := as.Rollback.Finished.Add(max(a.Bake, a.Interval))
	if as.Rollback.JudgedAt != nil {
		at = later(at, as.Rollback.JudgedAt.Add(a.Interval))
	}
	return max(at.Sub(now), 10*time.Millisecond)
}

func later(x, y time.Time) time.Time {
	if x.After(y) {
		return x
	}
	return y
}

// JudgeRollback records r, the analysis asked after the rollback: a pass
// says the rollback cured the workloads (Cured, asked no more), a failure
// that it did not (NotCured, asked again each interval), a hold that it
// cannot be told yet. The halt stays either way.
func JudgeRollback(as *v1.AnalysisStatus, r analysis.Result, now time.Time) {
	rb := as.Rollback
	rb.Verdict, rb.JudgedAt = string(r.Verdict), &metav1.Time{Time: now}
	switch r.Verdict {
	case analysis.Pass:
		rb.State, rb.Message = WaveCured, "the analysis passes after the rollback: it cured the workloads"
	case analysis.Fail:
		rb.State, rb.Message = WaveNotCured, "the analysis still fails after the rollback: "+r.Reason()
	default:
		rb.Message = "the analysis after the rollback cannot be judged yet: " + r.Reason()
	}
}

// RollbackMessage says what a finished rollback did.
func RollbackMessage(rb v1.WaveRollback) string {
	var back, failed []string
	for _, nr := range rb.Nodes {
		switch nr.State {
		case NodeRollbackDone:
			back = append(back, nr.Node+" ("+nr.From+" to "+nr.To+")")
		case NodeRollbackFailed:
			failed = append(failed, nr.Node+": "+nr.Message)
		}
	}
	msg := fmt.Sprintf("rollback of the wave at %s: %d of %d nodes back", rb.Version, len(back), len(rb.Nodes))
	if len(back) > 0 {
		msg += " [" + strings.Join(back, ", ") + "]"
	}
	if len(failed) > 0 {
		msg += "; not rolled back: " + strings.Join(failed, "; ")
	}
	return msg + "; the halt stays (no node moves forward)"
}

// ResumeAnnotation on a channel lifts a failed analysis's halt: a value
// not acted on yet (status.analysis.resumed) lifts it once.
const ResumeAnnotation = "ops.slipway.dev/resume"

// Resume acts on the resume annotation's value token: a new token is
// recorded in status.analysis.resumed and lifts the halt of a failed
// analysis (its failure, wave, rollback record), so that the rollout goes
// on once the analysis passes again. It reports whether a halt was lifted.
func Resume(st *v1.UpdateChannelStatus, token string) bool {
	if token == "" {
		return false
	}
	if st.Analysis == nil {
		st.Analysis = &v1.AnalysisStatus{}
	}
	as := st.Analysis
	if as.Resumed == token {
		return false
	}
	as.Resumed = token
	if as.Failed == nil {
		return false
	}
	*as = v1.AnalysisStatus{Resumed: token}
	return true
}
