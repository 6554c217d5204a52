package eds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/eds/plan"
)

// round is one sync of one ExtendedDaemonSet: the snapshot it acts on.
type round struct {
	e            *v1.ExtendedDaemonSet
	now          time.Time
	ersList      []*v1.ExtendedDaemonSetReplicaSet
	target       *v1.ExtendedDaemonSetReplicaSet // ERS of spec.template
	active       *v1.ExtendedDaemonSetReplicaSet // ERS of the validated template
	canary       *v1.ExtendedDaemonSetReplicaSet // target while it is a canary, else nil
	nodes        []*corev1.Node                  // eligible nodes, by name
	pods         []*corev1.Pod                   // the EDS's pods (and the old DaemonSet's)
	targets      map[string]string               // node -> ERS its pod should be of
	canaryNodes  []string
	adoptable    *error                 // canAdopt's answer, once per sync
	canaryWanted int                    // canary nodes the spec asks for (0: a timed hold on no node)
	history      []v1.CanaryPodRestarts // the canary pods' restarts, kept on the canary ERS
	selector     labels.Selector        // spec.selector
	failure      error                  // what the rollout step could not do
	recorded     bool                   // failure is in the status written
	verdict      plan.Verdict
	// The canary's analysis: its latest evaluation (nil: none named),
	// why it holds the canary ("" when it does not) and whether that is
	// because it could not be judged; failDetail names a failed query.
	analysis            *v1.CanaryAnalysisStatus
	analysisHold        string
	analysisCannotJudge bool
	failDetail          string
	plan                plan.Plan
	recheck             time.Duration
}

// sync reconciles one ExtendedDaemonSet and returns when to look again.
func (c *Controller) sync(ctx context.Context, key string) (time.Duration, error) {
	ns, name, _ := strings.Cut(key, "/")
	cached, err := c.sets.ExtendedDaemonSets(ns).Get(name)
	if err == nil {
		c.metrics.syncs.WithLabelValues(ns, name).Inc()
	}
	if apierrors.IsNotFound(err) {
		c.forget(ns, name)
		return 0, nil // its ERSs and pods go with it (owner references)
	}
	if err != nil || cached.DeletionTimestamp != nil {
		return 0, err
	}
	e := c.freshEDS(cached).DeepCopy()
	if err := c.undecodable.get(e.UID); err != nil {
		return 0, c.markInvalid(ctx, e, "Undecodable", fmt.Errorf("the controller cannot read this ExtendedDaemonSet (%w): nothing is done for it until it is fixed", err))
	}
	if err := validate(e); err != nil {
		return 0, c.markInvalid(ctx, e, "InvalidSpec", err)
	}
	r := &round{e: e, now: c.opts.Now()}
	after, err := c.reconcile(ctx, r)
	if err != nil && !r.recorded && ctx.Err() == nil {
		c.markReconcileError(ctx, e, err)
	}
	return after, err
}

// reconcile is one sync of a valid ExtendedDaemonSet.
func (c *Controller) reconcile(ctx context.Context, r *round) (time.Duration, error) {
	e := r.e
	if err := c.load(ctx, r); err != nil {
		return 0, err
	}
	if err := c.endManualDecisions(ctx, r); err != nil {
		return 0, err
	}
	if r.canary != nil && r.canary.Status.Status == v1.ReplicaSetStatusCanaryFailed {
		if st := e.Status.Canary; st != nil && st.ReplicaSet == r.canary.Name {
			r.canaryNodes = st.Nodes
		}
		return ended(c.finishFailure(ctx, r, failedReason(r.canary))) // failed, but the spec still holds its template
	}
	if r.canary != nil {
		done, err := c.runCanary(ctx, r)
		if err != nil || done {
			return ended(err) // the spec or the active ERS changed: start over
		}
	}
	// A failed creation or deletion (a quota, an admission webhook) does
	// not stop the status and the cleanup: the status says ReconcileError.
	r.failure = errors.Join(c.rollout(ctx, r), c.ensurePodTemplate(ctx, r))
	if err := c.cleanup(ctx, r); err != nil {
		return 0, errors.Join(r.failure, err)
	}
	if err := c.writeStatus(ctx, r); err != nil {
		return 0, errors.Join(r.failure, err)
	}
	if r.failure != nil {
		r.recorded = true
		return 0, r.failure
	}
	after := reconcileFrequency(e)
	if r.recheck > 0 && r.recheck < after {
		after = r.recheck
	}
	return after, nil
}

// ended is what a sync returns once its canary ended (or failed to):
// start over at once after a validation or a restored template; nothing
// when the spec changed meanwhile (its update event brings the next sync);
// an error otherwise, so that the retries back off through the queue's
// rate limiter instead of looping at full speed.
func ended(err error) (time.Duration, error) {
	switch {
	case errors.Is(err, errSpecChanged):
		return 0, nil
	case err != nil:
		return 0, err
	}
	return time.Millisecond, nil
}

func reconcileFrequency(e *v1.ExtendedDaemonSet) time.Duration {
	if f := e.Spec.Strategy.ReconcileFrequency; f != nil && f.Duration > 0 {
		return f.Duration
	}
	return 10 * time.Second
}

// load fills r: the ERSs (creating the target's), which is active and
// which a canary, the eligible nodes, the pods and each node's target ERS.
func (c *Controller) load(ctx context.Context, r *round) error {
	e := r.e
	err := c.loadERSs(ctx, r)
	if err != nil {
		return err
	}
	if r.target, err = c.ensureERS(ctx, r); err != nil {
		return err
	}
	r.active = r.find(e.Status.ActiveReplicaSet)
	if r.active == nil || r.active.Name == r.target.Name || e.Spec.Strategy.Canary == nil {
		r.active = r.target
	} else {
		r.canary = r.target
	}
	if r.selector, err = plan.Selector(e.Spec.Selector); err != nil {
		return err
	}
	r.nodes = c.eligibleNodes(r.selector, &r.active.Spec.Template.Spec)
	if r.pods, err = c.podsOf(ctx, e); err != nil {
		return err
	}
	r.targets = map[string]string{}
	for _, n := range r.nodes {
		r.targets[n.Name] = r.active.Name
	}
	return nil
}

func (r *round) find(name string) *v1.ExtendedDaemonSetReplicaSet {
	for _, s := range r.ersList {
		if s.Name == name && s.DeletionTimestamp == nil {
			return s
		}
	}
	return nil
}

// ensureERS returns the ERS of the spec's template, creating it when
// missing. A canary-failed ERS of the same template is replaced: applying
// a failed template again starts a new canary.
func (c *Controller) ensureERS(ctx context.Context, r *round) (*v1.ExtendedDaemonSetReplicaSet, error) {
	e := r.e
	hash := TemplateHash(&e.Spec.Template)
	name := ERSName(e.Name, hash)
	if s := r.find(name); s != nil {
		if s.Status.Status != v1.ReplicaSetStatusCanaryFailed || e.Generation <= failedAt(s)+1 {
			return s, nil // a failed ERS stays failed until the spec names its template again
		}
		if err := c.eds.ExtendedDaemonSetReplicaSets(e.Namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("delete the failed ERS %s to start its template again: %w", name, err)
		}
		return nil, fmt.Errorf("ERS %s of a failed canary is being replaced; retrying", name)
	}
	ers := &v1.ExtendedDaemonSetReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.Namespace,
			Labels:          map[string]string{v1.LabelEDSOwner: e.Name, v1.DataDogLabelName: e.Name}, // DataDog's label too, as their tools select ERSs by it
			Annotations:     map[string]string{v1.AnnotationTemplateHash: hash},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(e, v1.SchemeGroupVersion.WithKind("ExtendedDaemonSet"))}},
		Spec: v1.ExtendedDaemonSetReplicaSetSpec{Selector: e.Spec.Selector, Template: *e.Spec.Template.DeepCopy(), TemplateGeneration: hash},
	}
	created, err := c.eds.ExtendedDaemonSetReplicaSets(e.Namespace).Create(ctx, ers, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return c.existingERS(ctx, r, name)
	}
	if err != nil {
		return nil, fmt.Errorf("create ERS %s: %w", name, err)
	}
	r.ersList = append(r.ersList, created)
	return created, nil
}

// loadERSs fills r.ersList with the ERSs e controls (by owner reference)
// or that carry its owner label, and gives back the label to one that lost it.
func (c *Controller) loadERSs(ctx context.Context, r *round) error {
	e := r.e
	list, err := c.ers.ExtendedDaemonSetReplicaSets(e.Namespace).List(labels.Everything())
	if err != nil {
		return err
	}
	for _, s := range list {
		ref := metav1.GetControllerOf(s)
		ours := ref != nil && ref.UID == e.UID
		if !ours && (ref != nil || s.Labels[v1.LabelEDSOwner] != e.Name) {
			continue
		}
		if err := c.undecodable.get(s.UID); err != nil {
			c.recorder.Eventf(s, corev1.EventTypeWarning, EventUndecodable, "the controller cannot read this ERS: %v; delete it (the controller recreates it from the spec)", err)
			return fmt.Errorf("ERS %s cannot be read (%w): nothing is done for %s until it is deleted or fixed", s.Name, err, e.Name)
		}
		if ours && s.Labels[v1.LabelEDSOwner] != e.Name {
			if s, err = c.relabelERS(ctx, s, e.Name); err != nil {
				return err
			}
		}
		if ref == nil { // an orphan with our label (the EDS deleted with --cascade=orphan, then applied again)
			if s.DeletionTimestamp != nil {
				continue
			}
			if s, err = c.adoptERS(ctx, r, s); err != nil {
				return err
			}
		}
		r.ersList = append(r.ersList, c.freshERS(s))
	}
	return nil
}

// relabelERS puts back the owner label of an ERS e controls.
func (c *Controller) relabelERS(ctx context.Context, s *v1.ExtendedDaemonSetReplicaSet, owner string) (*v1.ExtendedDaemonSetReplicaSet, error) {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{v1.LabelEDSOwner: owner, v1.DataDogLabelName: owner}}})
	out, err := c.eds.ExtendedDaemonSetReplicaSets(s.Namespace).Patch(ctx, s.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("give ERS %s back its label %s=%s: %w", s.Name, v1.LabelEDSOwner, owner, err)
	}
	return out, nil
}

// existingERS is the ERS name that a create found already there: ours
// (then listed in r), or an error saying what to do with a stranger.
func (c *Controller) existingERS(ctx context.Context, r *round, name string) (*v1.ExtendedDaemonSetReplicaSet, error) {
	s, err := c.eds.ExtendedDaemonSetReplicaSets(r.e.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read the existing ERS %s: %w", name, err)
	}
	ref := metav1.GetControllerOf(s)
	if ref == nil && s.DeletionTimestamp == nil { // an orphan of this very name: this template's ERS
		if s, err = c.adoptERS(ctx, r, s); err != nil {
			return nil, err
		}
		ref = metav1.GetControllerOf(s)
	}
	if ref == nil || ref.UID != r.e.UID {
		return nil, fmt.Errorf("ERS %s exists but is controlled by %s: its pods are that owner's. Do not delete it with its pods: "+
			"rename the ExtendedDaemonSet, or, if that owner should not have it, delete the ERS with --cascade=orphan (its pods stay) "+
			"and the controller replaces them under the rolling limits", name, describeRef(ref))
	}
	if s.Labels[v1.LabelEDSOwner] != r.e.Name {
		if s, err = c.relabelERS(ctx, s, r.e.Name); err != nil {
			return nil, err
		}
	}
	r.ersList = append(r.ersList, s)
	return s, nil
}

func describeRef(ref *metav1.OwnerReference) string {
	if ref == nil {
		return "nothing (being deleted)"
	}
	return fmt.Sprintf("%s %s (uid %s)", ref.Kind, ref.Name, ref.UID)
}

// canAdopt says whether r's ExtendedDaemonSet may adopt orphans, as the
// DaemonSet controller's ControllerRefManager decides: read live (not
// from the cache), it is the same object (UID) and not being deleted. Read
// once per sync.
func (c *Controller) canAdopt(ctx context.Context, r *round) error {
	if r.adoptable != nil {
		return *r.adoptable
	}
	var err error
	// A list by name: the manifest grants list, not get (the same read).
	list, getErr := c.eds.ExtendedDaemonSets(r.e.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + r.e.Name})
	live := &v1.ExtendedDaemonSet{}
	if getErr == nil && len(list.Items) == 1 {
		live = &list.Items[0]
	}
	switch {
	case getErr != nil:
		err = fmt.Errorf("read ExtendedDaemonSet %s live before adopting orphans: %w", r.e.Name, getErr)
	case len(list.Items) != 1:
		err = fmt.Errorf("ExtendedDaemonSet %s is gone: not adopting orphans for it", r.e.Name)
	case live.UID != r.e.UID:
		err = fmt.Errorf("ExtendedDaemonSet %s was replaced (uid %s, cached %s): not adopting for the old one", r.e.Name, live.UID, r.e.UID)
	case live.DeletionTimestamp != nil:
		err = fmt.Errorf("ExtendedDaemonSet %s is being deleted: not adopting orphans", r.e.Name)
	}
	r.adoptable = &err
	return err
}

// ownerPatch is a merge patch giving an object (of UID uid, checked by the
// API server: the patch fails if the object was replaced meanwhile) the
// ExtendedDaemonSet as controller, beside its other owners.
func ownerPatch(e *v1.ExtendedDaemonSet, uid types.UID, others []metav1.OwnerReference) []byte {
	refs := append([]metav1.OwnerReference{}, others...)
	refs = append(refs, *metav1.NewControllerRef(e, v1.SchemeGroupVersion.WithKind("ExtendedDaemonSet")))
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"uid": uid, "ownerReferences": refs}})
	return patch
}

// adoptERS makes r's ExtendedDaemonSet the controller of an orphaned ERS
// (no controller, not being deleted): its pods (owned by the ERS) follow,
// and deleting the ExtendedDaemonSet deletes them again.
func (c *Controller) adoptERS(ctx context.Context, r *round, s *v1.ExtendedDaemonSetReplicaSet) (*v1.ExtendedDaemonSetReplicaSet, error) {
	if err := c.canAdopt(ctx, r); err != nil {
		return nil, err
	}
	out, err := c.eds.ExtendedDaemonSetReplicaSets(s.Namespace).Patch(ctx, s.Name, types.MergePatchType, ownerPatch(r.e, s.UID, s.OwnerReferences), metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("adopt the orphaned ERS %s: %w", s.Name, err)
	}
	c.recorder.Eventf(r.e, corev1.EventTypeNormal, EventAdopted, "adopted the orphaned ERS %s and its pods", s.Name)
	return out, nil
}

// failedAt is the ExtendedDaemonSet generation at which ERS s failed its canary.
func failedAt(s *v1.ExtendedDaemonSetReplicaSet) int64 {
	if cond := meta.FindStatusCondition(s.Status.Conditions, v1.ConditionCanaryFailed); cond != nil {
		return cond.ObservedGeneration
	}
	return 0
}

// failedReason is why ERS s failed its canary.
func failedReason(s *v1.ExtendedDaemonSetReplicaSet) string {
	if cond := meta.FindStatusCondition(s.Status.Conditions, v1.ConditionCanaryFailed); cond != nil {
		return cond.Reason
	}
	return plan.ReasonManuallyFailed
}

// failedERS is the ERS named by a True CanaryFailed condition, if any.
func failedERS(e *v1.ExtendedDaemonSet) string {
	for _, cond := range e.Status.Conditions {
		if cond.Type == v1.ConditionCanaryFailed && cond.Status == metav1.ConditionTrue {
			return ersFromMessage(cond.Message)
		}
	}
	return ""
}

// ersFromMessage reads the ERS name a canary condition's message starts with ("ERS <name>: ...").
func ersFromMessage(m string) string {
	rest, ok := strings.CutPrefix(m, "ERS ")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, ":")
	return name
}

// eligibleNodes are the nodes that should run a pod of template spec
// (the active ERS's: each ERS's pods follow its own template until the
// rollout replaces them), by name. The spec's node selector is not part
// of a template and applies at once; removals go through the rolling budget.
func (c *Controller) eligibleNodes(sel labels.Selector, spec *corev1.PodSpec) []*corev1.Node {
	var out []*corev1.Node
	for _, o := range c.nodes.List() {
		n := o.(*corev1.Node)
		if plan.Eligible(n, sel, spec) {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// later makes the sync come back after wait (when sooner than planned).
func (r *round) later(wait time.Duration) {
	if wait > 0 && (r.recheck <= 0 || wait < r.recheck) {
		r.recheck = wait
	}
}
