package controller

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/swarm/plan"
)

// writeStatus records the decision in the Swarm's status, when it differs.
func (c *Controller) writeStatus(ctx context.Context, sw *swarmv1.Swarm, g gathered, d plan.Decision) error {
	in := g.in
	st := sw.Status.DeepCopy()
	st.ObservedGeneration = sw.Generation
	st.Version = d.Config.Version
	st.WorkerCount = int32(len(d.Config.Workloads))
	st.Jobs = int32(len(in.Jobs))
	st.Unassigned = int32(d.Unassigned)
	if d.Moved > 0 {
		st.Moved = int32(d.Moved)
	}
	st.Workers = d.Workers
	valid := metav1.Condition{Type: swarmv1.ConditionInvalid, Status: metav1.ConditionFalse,
		Reason: "Valid", Message: "the spec and the job list can be assigned", ObservedGeneration: sw.Generation}
	if g.bad != nil {
		valid = c.invalidCondition(sw, g.bad, fmt.Sprintf("the last valid spec (%d jobs) stays in force", len(g.spec.Jobs)))
	}
	meta.SetStatusCondition(&st.Conditions, valid)
	meta.SetStatusCondition(&st.Conditions, balanced(in, d, sw.Generation))
	meta.SetStatusCondition(&st.Conditions, converged(d, sw.Generation))
	return c.updateStatus(ctx, sw, st)
}

func balanced(in plan.Input, d plan.Decision, gen int64) metav1.Condition {
	cond := metav1.Condition{Type: swarmv1.ConditionBalanced, ObservedGeneration: gen}
	switch {
	case d.Unassigned > 0 && len(d.Config.Workloads) == 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, "NoWorkers"
		cond.Message = fmt.Sprintf("no Ready worker: %d jobs wait for one", d.Unassigned)
	case len(d.LeftOut) > 0:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ReasonDegraded, degradedMessage(d)
	case d.Awaiting > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, "HandingOver"
		cond.Message = fmt.Sprintf("%d jobs are moving: each starts on its new worker once its old worker reports it stopped", d.Awaiting)
	case d.Unassigned > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, "Settling"
		cond.Message = fmt.Sprintf("%d jobs wait for the workers to settle", d.Unassigned)
	default:
		lo, hi := loads(d)
		cond.Status, cond.Reason = metav1.ConditionTrue, "Balanced"
		cond.Message = fmt.Sprintf("%d jobs over %d workers, %d to %d each", len(in.Jobs), len(d.Config.Workloads), lo, hi)
	}
	return cond
}

// loads are the least and most jobs of a worker without a dedicated job.
func loads(d plan.Decision) (lo, hi int) {
	lo = -1
	for _, w := range d.Workers {
		n := int(w.Jobs)
		if lo < 0 || n < lo {
			lo = n
		}
		hi = max(hi, n)
	}
	return max(lo, 0), hi
}

func converged(d plan.Decision, gen int64) metav1.Condition {
	cond := metav1.Condition{Type: swarmv1.ConditionConverged, ObservedGeneration: gen,
		Status: metav1.ConditionTrue, Reason: "Converged", Message: "every worker runs its share"}
	if d.Converged {
		return cond
	}
	pending, restarting := 0, 0
	for _, w := range d.Workers {
		switch w.Phase {
		case swarmv1.PhasePending:
			pending++
		case swarmv1.PhaseRestarting:
			restarting++
		}
	}
	cond.Status, cond.Reason = metav1.ConditionFalse, "Refreshing"
	cond.Message = fmt.Sprintf("%d workers restarting, %d not yet reporting the version of their share", restarting, pending)
	return cond
}

// markInvalid records a spec or job list that cannot be assigned: the
// Invalid condition and a Warning Event; the workers' ConfigMap and the rest
// of the status stay as they were.
func (c *Controller) markInvalid(ctx context.Context, sw *swarmv1.Swarm, bad *invalid) error {
	st := sw.Status.DeepCopy()
	st.ObservedGeneration = sw.Generation
	meta.SetStatusCondition(&st.Conditions, c.invalidCondition(sw, bad, "the previous assignment stays in force"))
	return c.updateStatus(ctx, sw, st)
}

// invalidCondition is the Invalid condition for bad, with a Warning Event
// and a log line when it is new; then says what the controller acts on.
func (c *Controller) invalidCondition(sw *swarmv1.Swarm, bad *invalid, then string) metav1.Condition {
	cond := metav1.Condition{Type: swarmv1.ConditionInvalid, Status: metav1.ConditionTrue,
		Reason: bad.reason, Message: bad.message + " (" + then + ")", ObservedGeneration: sw.Generation}
	old := meta.FindStatusCondition(sw.Status.Conditions, swarmv1.ConditionInvalid)
	if old == nil || old.Status != cond.Status || old.Message != cond.Message {
		c.recorder.Event(sw, corev1.EventTypeWarning, bad.reason, bad.message)
		c.log.Warn("Swarm cannot be assigned", "swarm", sw.Name, "reason", bad.reason, "err", bad.message, "then", then)
	}
	c.metrics.invalid.WithLabelValues(sw.Name).Set(1)
	return cond
}

// ReasonDegraded is the Balanced condition's reason (and the Warning
// Event's) while the Ready workers are too few for the dedicated jobs.
const ReasonDegraded = "Degraded"

func degradedMessage(d plan.Decision) string {
	return fmt.Sprintf("too few Ready workers for the dedicated jobs: %d wait for a worker of their own (%s), every other job is placed: add workers or dedicate fewer jobs",
		len(d.LeftOut), strings.Join(d.LeftOut[:min(len(d.LeftOut), 10)], ", "))
}

func (c *Controller) updateStatus(ctx context.Context, sw *swarmv1.Swarm, st *swarmv1.SwarmStatus) error {
	if equality.Semantic.DeepEqual(&sw.Status, st) {
		return nil
	}
	upd := sw.DeepCopy()
	upd.Status = *st
	done, err := c.swarm.Swarms(sw.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("update the status of Swarm %s: %w", sw.Name, err)
	}
	c.mu.Lock()
	c.written[sw.Namespace+"/"+sw.Name] = done.ResourceVersion
	c.mu.Unlock()
	return nil
}
