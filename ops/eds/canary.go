package eds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/eds/plan"
)

// runCanary chooses the canary nodes, points them at the canary ERS and
// acts on the verdict. It returns done when the canary ended (validated or
// failed): the spec or the active ERS changed and the sync starts over.
func (c *Controller) runCanary(ctx context.Context, r *round) (done bool, err error) {
	e, cs := r.e, r.e.Spec.Strategy.Canary
	sel, _ := plan.Selector(cs.NodeSelector) // validated
	n, _ := plan.Scaled(cs.Replicas, len(r.nodes), 1)
	r.canaryWanted = n
	restarts := map[string]int32{}
	for _, p := range r.pods {
		if h := plan.PodHealth(p); h.Restarts > restarts[nodeOf(p)] {
			restarts[nodeOf(p)] = h.Restarts
		}
	}
	var cands []plan.Candidate
	for _, node := range r.nodes { // nodes the canary's own template admits too
		if sel.Matches(labels.Set(node.Labels)) && plan.Eligible(node, labels.Everything(), &r.canary.Spec.Template.Spec) {
			cands = append(cands, plan.Candidate{Name: node.Name, Labels: node.Labels, Restarts: restarts[node.Name]})
		}
	}
	var current []string
	if e.Status.Canary != nil && e.Status.Canary.ReplicaSet == r.canary.Name {
		current = e.Status.Canary.Nodes
	}
	r.canaryNodes = plan.CanaryNodes(cands, n, cs.NodeAntiAffinityKeys, current)
	for _, node := range r.canaryNodes {
		r.targets[node] = r.canary.Name
	}
	state := c.canaryState(r)
	policy := canaryPolicy(cs)
	r.verdict = plan.CanaryVerdict(policy, state)
	if cs.Analysis != nil {
		if err := c.judgeAnalysis(ctx, r, policy, state); err != nil {
			return false, err
		}
	}
	r.later(r.verdict.RecheckAfter)
	switch r.verdict.Action {
	case plan.Validate:
		return true, c.validateCanary(ctx, r)
	case plan.Fail:
		return true, c.failCanary(ctx, r)
	}
	return false, c.markCanaryERS(ctx, r, state)
}

// canaryState gathers the verdict's inputs from the canary pods, the ERS's
// conditions and the ExtendedDaemonSet's annotations.
func (c *Controller) canaryState(r *round) plan.CanaryState {
	e, name := r.e, r.canary.Name
	// replicas 0 ("0%") wants no node: a timed hold, validated by time as
	// DataDog's; NoEligibleNode is a canary that wants nodes and finds none.
	s := plan.CanaryState{Now: r.now, Start: r.canary.CreationTimestamp.Time, Expected: len(r.canaryNodes),
		NoEligibleNode: len(r.canaryNodes) == 0 && len(r.nodes) > 0 && r.canaryWanted > 0}
	onCanary := map[string]bool{}
	for _, n := range r.canaryNodes {
		onCanary[n] = true
	}
	var ours []*corev1.Pod
	current := map[string]int{}
	for _, p := range r.pods {
		if p.Labels[v1.LabelReplicaSet] != name {
			continue
		}
		ours = append(ours, p) // a deleting pod's last restarts count too
		if !onCanary[nodeOf(p)] || p.DeletionTimestamp != nil {
			continue
		}
		h := plan.PodHealth(p)
		current[nodeOf(p)] = len(s.Pods)
		s.Pods = append(s.Pods, h)
		if h.CannotStart != "" && (s.CannotStartSince.IsZero() || p.CreationTimestamp.Time.Before(s.CannotStartSince)) {
			s.CannotStartSince = p.CreationTimestamp.Time
		}
		if h.Creating && (s.CreatingSince.IsZero() || p.CreationTimestamp.Time.Before(s.CreatingSince)) {
			s.CreatingSince = p.CreationTimestamp.Time
		}
	}
	r.history = mergeRestarts(r.canary.Status.CanaryRestarts, ours)
	s.Pods, s.Past = withHistory(s.Pods, current, r.canaryNodes, r.history)
	if cond := meta.FindStatusCondition(r.canary.Status.Conditions, v1.ConditionPodRestarting); cond != nil && cond.Status == metav1.ConditionTrue {
		s.RestartingSince = cond.LastTransitionTime.Time
	}
	valid, _ := annotation(e.Annotations, v1.AnnotationCanaryValid)
	failed, _ := annotation(e.Annotations, v1.AnnotationCanaryFailed)
	paused, _ := annotation(e.Annotations, v1.AnnotationCanaryPaused)
	s.Validated, s.ManuallyFailed = valid == name, failed == name
	unpaused, _ := annotation(e.Annotations, v1.AnnotationCanaryUnpaused)
	s.ManuallyPaused, s.ManuallyUnpaused = paused == "true", paused == "false" || unpaused == "true"
	s.PausedReason, _ = annotation(e.Annotations, v1.AnnotationCanaryPausedReason)
	return s
}

// markCanaryERS records on the canary ERS its status and the conditions
// PodRestarting and PodCannotStart (their transition times feed the verdict).
func (c *Controller) markCanaryERS(ctx context.Context, r *round, s plan.CanaryState) error {
	cp := r.canary.DeepCopy()
	cp.Status.Status = v1.ReplicaSetStatusCanary
	cp.Status.CanaryRestarts = r.history
	var restarts int32
	for _, h := range s.Pods {
		restarts = max(restarts, h.Restarts)
	}
	cannot, msg := cannotStartPod(r)
	setCond(&cp.Status.Conditions, v1.ConditionPodRestarting, restarts > 0, "Restarts", fmt.Sprintf("a canary pod restarted %d times", restarts))
	setCond(&cp.Status.Conditions, v1.ConditionPodCannotStart, cannot != "", nonEmpty(cannot, "Started"), msg)
	setCond(&cp.Status.Conditions, v1.ConditionCanaryPaused, r.verdict.Action == plan.Pause, nonEmpty(r.verdict.Reason, "Running"), "")
	return c.updateERSStatus(ctx, r, r.canary, cp)
}

// cannotStartPod is the first canary pod (by name) with a container that
// cannot start: the reason, and DataDog's message "Pod <name> cannot start
// with reason: <reason>" ("" when none).
func cannotStartPod(r *round) (reason, msg string) {
	onCanary := map[string]bool{}
	for _, n := range r.canaryNodes {
		onCanary[n] = true
	}
	var name string
	for _, p := range r.pods {
		// trust: eds.pod.labels
		if p.Labels[v1.LabelReplicaSet] != r.canary.Name || !onCanary[nodeOf(p)] || p.DeletionTimestamp != nil {
			continue
		}
		if h := plan.PodHealth(p); h.CannotStart != "" && (name == "" || p.Name < name) {
			name, reason = p.Name, h.CannotStart
		}
	}
	if name == "" {
		return "", ""
	}
	return reason, fmt.Sprintf("Pod %s cannot start with reason: %s", name, reason)
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// setCond sets a condition when its status or reason changed (an
// unchanged one keeps its transition time).
func setCond(conds *[]metav1.Condition, t string, on bool, reason, msg string) {
	st := metav1.ConditionFalse
	if on {
		st = metav1.ConditionTrue
	}
	meta.SetStatusCondition(conds, metav1.Condition{Type: t, Status: st, Reason: reason, Message: msg})
}

// validateCanary makes the canary ERS active: the rolling update carries it
// to the other nodes.
func (c *Controller) validateCanary(ctx context.Context, r *round) error {
	cp := r.canary.DeepCopy()
	cp.Status.Status = v1.ReplicaSetStatusActive
	setCond(&cp.Status.Conditions, v1.ConditionCanaryPaused, false, "Validated", "")
	if err := c.updateERSStatus(ctx, r, r.canary, cp); err != nil {
		return err
	}
	e := r.e.DeepCopy()
	e.Status.ActiveReplicaSet, e.Status.Canary, e.Status.Reason = r.canary.Name, nil, ""
	e.Status.State = v1.StateRunning
	setCond(&e.Status.Conditions, v1.ConditionCanary, false, r.verdict.Reason, "ERS "+r.canary.Name+": validated")
	setCond(&e.Status.Conditions, v1.ConditionCanaryPaused, false, r.verdict.Reason, "")
	if _, _, err := c.putEDSStatus(ctx, r.e, e.Status); err != nil {
		return fmt.Errorf("record the validated canary %s: %w", r.canary.Name, err)
	}
	c.metrics.verdicts.WithLabelValues("validated").Inc()
	c.forgetAnalysis(r.canary.UID)
	passed := ""
	if r.analysis != nil && r.analysis.Verdict == "Pass" {
		passed = ", its analysis passed"
	}
	c.recorder.Eventf(e, corev1.EventTypeNormal, EventCanaryValidated, "canary ERS %s validated (%s%s) on nodes %v; rolling it out", r.canary.Name, r.verdict.Reason, passed, r.canaryNodes)
	return nil
}

// failCanary marks the canary ERS failed, then finishes the failure: the
// active template back into the spec, then the state.
func (c *Controller) failCanary(ctx context.Context, r *round) error {
	cp := r.canary.DeepCopy()
	cp.Status.Status = v1.ReplicaSetStatusCanaryFailed
	setCond(&cp.Status.Conditions, v1.ConditionCanaryFailed, true, r.verdict.Reason, r.failDetail)
	meta.FindStatusCondition(cp.Status.Conditions, v1.ConditionCanaryFailed).ObservedGeneration = r.e.Generation
	if err := c.updateERSStatus(ctx, r, r.canary, cp); err != nil {
		return err
	}
	c.metrics.verdicts.WithLabelValues("failed").Inc()
	if r.verdict.Reason == plan.ReasonAnalysisFailed && r.analysis != nil {
		c.metrics.analysisFailures.WithLabelValues(r.e.Namespace, r.e.Name, r.analysis.Query).Inc()
		c.recorder.Eventf(r.e, corev1.EventTypeWarning, EventCanaryAnalysisFailed, "%s", analysisEventMessage(r, r.analysis))
	}
	c.forgetAnalysis(r.canary.UID)
	return c.finishFailure(ctx, r, r.verdict.Reason)
}

// finishFailure restores the active template into the spec and only then
// records the state CanaryFailed: whoever reads that state reads the
// restored template with it (two writes, the spec first). A sync that
// finds the canary ERS failed while the spec still holds its template
// comes here again, so a crash between the writes loses neither.
func (c *Controller) finishFailure(ctx context.Context, r *round, reason string) error {
	if err := c.restoreTemplate(ctx, r); err != nil {
		return err
	}
	e := r.e.DeepCopy()
	e.Status.State, e.Status.Reason, e.Status.Canary = v1.StateCanaryFailed, reason, nil
	setCond(&e.Status.Conditions, v1.ConditionCanaryFailed, true, reason, failedMessage(r.canary.Name, r.canaryNodes, r.failDetail))
	setAnalysisCondition(&e.Status, e, &round{})
	setCond(&e.Status.Conditions, v1.ConditionCanary, false, reason, "ERS "+r.canary.Name+": failed")
	wrote, _, err := c.putEDSStatus(ctx, r.e, e.Status)
	if err != nil {
		return fmt.Errorf("record the failed canary %s: %w", r.canary.Name, err)
	}
	if wrote {
		c.recorder.Eventf(e, corev1.EventTypeWarning, EventCanaryFailed, "%s (%s); restored the template of ERS %s",
			failedMessage(r.canary.Name, r.canaryNodes, r.failDetail), reason, r.active.Name)
	}
	return nil
}

// failedMessage says which canary failed, and where when that is known (a
// sync that finishes a failure recorded before may not know the nodes).
// detail, when set, says what failed it (the analysis's query and value).
func failedMessage(ers string, nodes []string, detail string) string {
	m := "ERS " + ers + ": failed"
	if len(nodes) > 0 {
		m += " on nodes " + strings.Join(nodes, ", ")
	}
	if detail != "" {
		m += "; " + detail
	}
	return m
}

// endManualDecisions removes the manual canary annotations once their
// canary ended: none runs, or another template replaced the one the status
// names (a user's decision names the canary kubectl-eds read there). r.e
// gets the annotations the API server kept.
func (c *Controller) endManualDecisions(ctx context.Context, r *round) error {
	prev := r.e.Status.Canary
	if r.canary != nil && (prev == nil || prev.ReplicaSet == r.canary.Name) {
		return nil
	}
	remove := map[string]any{}
	for _, k := range v1.ManualCanaryAnnotations {
		for _, key := range []string{k, v1.DataDog(k)} {
			if _, ok := r.e.Annotations[key]; ok {
				remove[key] = nil
			}
		}
	}
	if len(remove) == 0 {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": remove}})
	out, err := c.eds.ExtendedDaemonSets(r.e.Namespace).Patch(ctx, r.e.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("remove the manual decisions about the ended canary: %w", err)
	}
	r.e.Annotations = out.Annotations
	return nil
}

// updateERSStatus writes next's status when it differs from s's; a
// counts-only change waits (r.recheck brings the sync back).
func (c *Controller) updateERSStatus(ctx context.Context, r *round, s, next *v1.ExtendedDaemonSetReplicaSet) error {
	wait, err := c.putERSStatus(ctx, s, next.Status)
	r.later(wait)
	return err
}

// errSpecChanged says the spec changed before the active template was
// restored: the user's new template wins and its update event brings the
// next sync, which decides again.
var errSpecChanged = errors.New("the spec changed before the active template was restored")

// restoreTemplate puts the active ERS's template back into the spec after
// a failed canary. The JSON patch tests the generation first: a spec changed
// meanwhile (a user's new template) wins (errSpecChanged); status writes do
// not stand in its way as a resourceVersion would. Any other refusal (an
// admission policy the active template no longer passes, a webhook down)
// is an error: the sync backs off and says why in ReconcileError.
func (c *Controller) restoreTemplate(ctx context.Context, r *round) error {
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/generation", "value": r.e.Generation},
		{"op": "replace", "path": "/spec/template", "value": r.active.Spec.Template},
	})
	if err == nil {
		_, err = c.eds.ExtendedDaemonSets(r.e.Namespace).Patch(ctx, r.e.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
	}
	if generationTestFailed(err) {
		c.log.Debug("spec changed before the active template was restored; deciding again", "eds", r.e.Namespace+"/"+r.e.Name)
		return errSpecChanged
	}
	if err != nil {
		return fmt.Errorf("restore the active template (ERS %s) after the failed canary %s: %w; the spec still holds the failed template: "+
			"let the API server accept the active template again, or apply a template it accepts", r.active.Name, r.canary.Name, err)
	}
	return nil
}

// generationTestFailed says whether err is the API server's answer to a
// JSON patch whose test of /metadata/generation failed (a 422 like an
// admission refusal, told apart by its message: no cause, no kind).
func generationTestFailed(err error) bool {
	var st apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &st) {
		return false
	}
	s := st.Status()
	return (s.Details == nil || (s.Details.Kind == "" && len(s.Details.Causes) == 0)) &&
		strings.Contains(s.Message, "testing value /metadata/generation failed")
}
