package eds

import (
	"context"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
)

// oldGoneRecheck is how long an old DaemonSet found gone is taken as gone.
const oldGoneRecheck = 10 * time.Minute

// oldDrainedRecheck is how long an old DaemonSet found drained (placing no
// pod on any node, and none of its pods left) is taken as drained. It
// bounds how long a pod the user makes it place again (by editing it
// after the migration) can run beside this ExtendedDaemonSet's before the
// node is taken from it again.
const oldDrainedRecheck = time.Minute

// oldDaemonSetPods are the pods of the DaemonSet named by e's old-daemonset
// annotation: they count as the previous version on their nodes and are
// replaced under the rolling limits. None when the annotation or the
// DaemonSet is missing. A DaemonSet found gone (the migration's end: the
// user deletes it) is not read again for oldGoneRecheck while the
// annotation stays: the annotation alone no longer costs a GET and a LIST
// per sync. Nor does a DaemonSet that still exists but is drained (the
// migration done: it schedules no pod, none of its pods is left; see
// oldDrained): it is read again after oldDrainedRecheck.
func (c *Controller) oldDaemonSetPods(ctx context.Context, e *v1.ExtendedDaemonSet) ([]*corev1.Pod, error) {
	name, ok := annotation(e.Annotations, v1.AnnotationOldDaemonSet)
	if !ok || name == "" {
		return nil, nil
	}
	key := string(e.UID) + "/" + name
	c.mu.Lock()
	gone, seen := c.oldGone[key]
	drainedAt, drained := c.oldDrained[key]
	c.mu.Unlock()
	if seen && time.Since(gone) < oldGoneRecheck || drained && time.Since(drainedAt) < oldDrainedRecheck {
		return nil, nil
	}
	ds, err := c.kube.AppsV1().DaemonSets(e.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		c.mu.Lock()
		c.oldGone[key] = time.Now()
		c.mu.Unlock()
		if !seen {
			c.recorder.Eventf(e, corev1.EventTypeNormal, EventMigrated, "the old DaemonSet %s is gone: the migration is over; the annotation old-daemonset can be removed", name)
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the old DaemonSet %s: %w", name, err)
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("the old DaemonSet %s has an invalid selector: %w", name, err)
	}
	list, err := c.kube.CoreV1().Pods(e.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("list the pods of the old DaemonSet %s: %w", name, err)
	}
	var out []*corev1.Pod
	for i := range list.Items {
		p := &list.Items[i]
		// trust: eds.pod.owner
		if ref := metav1.GetControllerOf(p); ref != nil && ref.UID == ds.UID {
			out = append(out, p)
		}
	}
	c.mu.Lock()
	if oldDrained(ds, len(out)) {
		c.oldDrained[key] = time.Now()
	} else {
		delete(c.oldDrained, key)
	}
	c.mu.Unlock()
	return out, nil
}

// oldDrained says whether the old DaemonSet ds, of which owned pods were
// found, has nothing left to migrate: its controller has seen its
// current spec and schedules it on no node, and no pod of it is left
// (pods being deleted included). Until then it is read on every sync: the
// migration loop waits on its pods' going.
func oldDrained(ds *appsv1.DaemonSet, owned int) bool {
	st := ds.Status
	return owned == 0 && st.ObservedGeneration >= ds.Generation &&
		st.DesiredNumberScheduled == 0 && st.CurrentNumberScheduled == 0 && st.NumberMisscheduled == 0
}

// releaseFromDaemonSet makes the old DaemonSet leave nodes: its update
// strategy becomes OnDelete (it rolls nothing itself) and its template
// excludes the nodes by a required affinity on metadata.name, so that the
// DaemonSet controller deletes its pods there and never recreates them.
func (c *Controller) releaseFromDaemonSet(ctx context.Context, r *round, nodes []string) error {
	name, _ := annotation(r.e.Annotations, v1.AnnotationOldDaemonSet)
	client := c.kube.AppsV1().DaemonSets(r.e.Namespace)
	ds, err := client.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read the old DaemonSet %s: %w", name, err)
	}
	before := ds.DeepCopy()
	excludeNodes(ds, nodes)
	if equality.Semantic.DeepEqual(before.Spec, ds.Spec) {
		return nil // already excluded; its pods there are on their way out
	}
	if _, err := client.Update(ctx, ds, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("move the old DaemonSet %s off nodes %v: %w", name, nodes, err)
	}
	c.recorder.Eventf(r.e, corev1.EventTypeNormal, EventMigrating, "DaemonSet %s leaves nodes %v for this ExtendedDaemonSet", name, nodes)
	c.metrics.actions.WithLabelValues("delete").Add(float64(len(nodes)))
	return nil
}

// excludeNodes adds nodes to the metadata.name NotIn requirement of every
// required node-selector term of ds (creating one term if there is none),
// and sets its update strategy to OnDelete.
func excludeNodes(ds *appsv1.DaemonSet, nodes []string) {
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	spec := &ds.Spec.Template.Spec
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil || len(na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0 {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{}}}
	}
	// A node field selector takes one value per requirement: one NotIn per node.
	terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for i := range terms {
		for _, n := range nodes {
			req := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{n}}
			if !slices.ContainsFunc(terms[i].MatchFields, func(r corev1.NodeSelectorRequirement) bool {
				return r.Key == req.Key && r.Operator == req.Operator && slices.Equal(r.Values, req.Values)
			}) {
				terms[i].MatchFields = append(terms[i].MatchFields, req)
			}
		}
	}
}
