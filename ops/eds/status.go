package eds

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/eds/plan"
)

// counts are the pod counts of an ExtendedDaemonSet or of one ERS.
type counts struct{ desired, current, ready, available int32 }

// writeStatus computes the status of r's ExtendedDaemonSet and its ERSs,
// writes what changed and records an Event when the state changed.
func (c *Controller) writeStatus(ctx context.Context, r *round) error {
	e := r.e
	total, byERS, upToDate := c.count(r)
	next := e.DeepCopy()
	st := &next.Status
	st.ObservedGeneration = e.Generation
	st.Desired, st.Current, st.Ready, st.Available, st.UpToDate = total.desired, total.current, total.ready, total.available, upToDate
	st.IgnoredUnresponsiveNodes = int32(r.plan.Ignored)
	st.ActiveReplicaSet = r.active.Name
	st.Canary, st.Reason = nil, ""
	if r.canary != nil {
		st.Canary = &v1.ExtendedDaemonSetStatusCanary{ReplicaSet: r.canary.Name, Nodes: r.canaryNodes, Analysis: r.analysis}
		setCond(&st.Conditions, v1.ConditionCanaryFailed, false, "NewCanary", "")
	}
	setAnalysisCondition(st, e, r)
	paused := r.verdict.Action == plan.Pause
	setCond(&st.Conditions, v1.ConditionCanary, r.canary != nil, "Canary", canaryMessage(r))
	setCond(&st.Conditions, v1.ConditionCanaryPaused, paused, nonEmpty(r.verdict.Reason, "NotPaused"), "")
	setCond(&st.Conditions, v1.ConditionRollingUpdatePaused, isTrue(e.Annotations, v1.AnnotationRollingUpdatePaused), "Annotation", "")
	setCond(&st.Conditions, v1.ConditionRolloutFrozen, isTrue(e.Annotations, v1.AnnotationRolloutFrozen), "Annotation", "")
	setCond(&st.Conditions, v1.ConditionInvalid, false, "Valid", "")
	if r.failure != nil {
		setCond(&st.Conditions, v1.ConditionReconcileError, true, "ReconcileError", r.failure.Error())
	} else {
		setCond(&st.Conditions, v1.ConditionReconcileError, false, "Reconciled", "")
	}
	failed, why := failedERS(next), e.Status.Reason
	if s := unrecordedFailure(r); failed == "" && s != nil { // the spec was restored, the state not yet written
		failed, why = s.Name, failedReason(s)
		setCond(&st.Conditions, v1.ConditionCanaryFailed, true, why, "ERS "+s.Name+": failed")
	}
	switch {
	case isTrue(e.Annotations, v1.AnnotationRolloutFrozen):
		st.State = v1.StateRolloutFrozen
	case isTrue(e.Annotations, v1.AnnotationRollingUpdatePaused):
		st.State = v1.StateRollingUpdatePaused
	case paused:
		st.State, st.Reason = v1.StateCanaryPaused, r.verdict.Reason
	case r.canary != nil:
		st.State = v1.StateCanary
		if r.analysisCannotJudge {
			st.Reason = ReasonAnalysisHolding
		}
	case failed != "":
		st.State, st.Reason = v1.StateCanaryFailed, why
	default:
		st.State = v1.StateRunning
	}
	if err := c.writeERSStatuses(ctx, r, byERS, failed); err != nil {
		return err
	}
	c.metrics.observe(next, byERS)
	wrote, wait, err := c.putEDSStatus(ctx, e, next.Status)
	r.later(wait)
	if wrote {
		c.announce(e, next)
	}
	return err
}

// unrecordedFailure is a failed canary ERS whose restore is the spec's last
// change (generation one past its failure), when no canary runs.
func unrecordedFailure(r *round) *v1.ExtendedDaemonSetReplicaSet {
	if r.canary != nil {
		return nil
	}
	for _, s := range r.ersList {
		if s.Status.Status == v1.ReplicaSetStatusCanaryFailed && s.Name != r.target.Name && failedAt(s)+1 == r.e.Generation {
			return s
		}
	}
	return nil
}

func canaryMessage(r *round) string {
	if r.canary == nil {
		return ""
	}
	return fmt.Sprintf("ERS %s: canary on nodes %v", r.canary.Name, r.canaryNodes)
}

// count counts the ExtendedDaemonSet's own pods on eligible nodes, in all
// and by ERS, and those of the spec's template.
func (c *Controller) count(r *round) (total counts, byERS map[string]*counts, upToDate int32) {
	byERS = map[string]*counts{}
	for _, s := range r.ersList {
		byERS[s.Name] = &counts{}
	}
	total.desired = int32(len(r.nodes))
	for _, target := range r.targets {
		if b := byERS[target]; b != nil {
			b.desired++
		}
	}
	for _, p := range r.pods {
		if _, eligible := r.targets[nodeOf(p)]; !eligible || p.DeletionTimestamp != nil || p.Labels[v1.LabelName] != r.e.Name {
			continue
		}
		ready := plan.PodHealth(p).Ready
		// trust: eds.pod.status
		available := ready && p.Status.Phase == corev1.PodRunning
		for _, k := range []*counts{&total, byERS[p.Labels[v1.LabelReplicaSet]]} {
			if k == nil {
				continue
			}
			k.current++
			k.ready += b2i(ready)
			k.available += b2i(available)
		}
		if p.Labels[v1.LabelReplicaSet] == r.target.Name {
			upToDate++
		}
	}
	return total, byERS, upToDate
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// writeERSStatuses writes each ERS's role and counts when they changed.
func (c *Controller) writeERSStatuses(ctx context.Context, r *round, byERS map[string]*counts, failed string) error {
	for _, s := range r.ersList {
		s = c.freshERS(s) // with what this sync wrote already
		cp := s.DeepCopy()
		k := byERS[s.Name]
		cp.Status.Desired, cp.Status.Current, cp.Status.Ready, cp.Status.Available = k.desired, k.current, k.ready, k.available
		switch {
		case s.Name == r.active.Name:
			cp.Status.Status = v1.ReplicaSetStatusActive
		case r.canary != nil && s.Name == r.canary.Name:
			cp.Status.Status = v1.ReplicaSetStatusCanary
		case s.Status.Status == v1.ReplicaSetStatusCanaryFailed:
		default:
			cp.Status.Status = v1.ReplicaSetStatusUnknown
		}
		if err := c.updateERSStatus(ctx, r, s, cp); err != nil {
			return err
		}
	}
	return nil
}

// announce records an Event when the state changed.
func (c *Controller) announce(old, next *v1.ExtendedDaemonSet) {
	o, n := old.Status, next.Status
	switch {
	case n.State == o.State && n.ActiveReplicaSet == o.ActiveReplicaSet:
	case n.State == v1.StateCanary && o.State != v1.StateCanaryPaused:
		c.recorder.Eventf(next, corev1.EventTypeNormal, EventCanaryStarted, "canary ERS %s started on nodes %v", n.Canary.ReplicaSet, n.Canary.Nodes)
	case n.State == v1.StateCanary:
		c.recorder.Eventf(next, corev1.EventTypeNormal, EventCanaryUnpaused, "canary ERS %s resumed", n.Canary.ReplicaSet)
	case n.State == v1.StateCanaryPaused:
		c.metrics.verdicts.WithLabelValues("paused").Inc()
		c.recorder.Eventf(next, corev1.EventTypeWarning, EventCanaryPaused, "canary ERS %s paused: %s", n.Canary.ReplicaSet, n.Reason)
	case n.ActiveReplicaSet != o.ActiveReplicaSet && o.ActiveReplicaSet != "":
		c.recorder.Eventf(next, corev1.EventTypeNormal, EventRollingUpdate, "rolling ERS %s out (replacing %s)", n.ActiveReplicaSet, o.ActiveReplicaSet)
	default:
		c.recorder.Eventf(next, corev1.EventTypeNormal, EventStateChanged, "state %s (was %s)", n.State, nonEmpty(string(o.State), "none"))
	}
	if n.UpToDate == n.Desired && n.Current == n.Desired && n.State == v1.StateRunning && (o.UpToDate != o.Desired || o.Current != o.Desired) {
		c.recorder.Eventf(next, corev1.EventTypeNormal, EventRolledOut, "ERS %s runs on all %d nodes", n.ActiveReplicaSet, n.Desired)
	}
}

// markInvalid records a spec the controller cannot act on: condition
// Invalid and a Warning Event, once per distinct message; no retry until it changes.
func (c *Controller) markInvalid(ctx context.Context, e *v1.ExtendedDaemonSet, reason string, problem error) error {
	next := e.DeepCopy()
	setCond(&next.Status.Conditions, v1.ConditionInvalid, true, reason, problem.Error())
	next.Status.ObservedGeneration = e.Generation
	wrote, _, err := c.putEDSStatus(ctx, e, next.Status)
	if !wrote {
		return err
	}
	event := EventInvalid
	if reason == "Undecodable" {
		event = EventUndecodable
	}
	c.recorder.Eventf(e, corev1.EventTypeWarning, event, "%v; fix the spec (kubectl edit eds %s)", problem, e.Name)
	return nil
}

// markReconcileError records a failed sync on the ExtendedDaemonSet (as
// DataDog's condition ReconcileError); the next good sync clears it. Best
// effort: the failure itself is retried and counted in the metrics.
func (c *Controller) markReconcileError(ctx context.Context, e *v1.ExtendedDaemonSet, problem error) {
	next := e.DeepCopy()
	setCond(&next.Status.Conditions, v1.ConditionReconcileError, true, "ReconcileError", problem.Error())
	wrote, _, err := c.putEDSStatus(ctx, e, next.Status)
	if err != nil {
		c.log.Debug("could not record the reconcile error", "eds", e.Namespace+"/"+e.Name, "err", err)
	}
	if wrote { // once per distinct error, not once per retry
		c.recorder.Eventf(e, corev1.EventTypeWarning, EventReconcileError, "%v", problem)
	}
}

// cleanup deletes the ERSs that are neither active, nor the spec's, nor
// the last failed canary, once none of their pods is left.
func (c *Controller) cleanup(ctx context.Context, r *round) error {
	inUse := map[string]bool{}
	for _, p := range r.pods {
		inUse[p.Labels[v1.LabelReplicaSet]] = true
	}
	keep := failedERS(r.e)
	var left []*v1.ExtendedDaemonSetReplicaSet
	defer func() { r.ersList = left }()
	for _, s := range r.ersList {
		if s.Name == r.active.Name || s.Name == r.target.Name || s.Name == keep || inUse[s.Name] || s.DeletionTimestamp != nil {
			left = append(left, s)
			continue
		}
		err := c.eds.ExtendedDaemonSetReplicaSets(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete the unused ERS %s: %w", s.Name, err)
		}
		c.mu.Lock()
		delete(c.written, "ers/"+string(s.UID))
		c.mu.Unlock()
	}
	return nil
}
