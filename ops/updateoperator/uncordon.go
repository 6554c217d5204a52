package updateoperator

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/drain"
)

// An uncordon is two writes of the record around its Node write. The
// record is written before each Node write it stands for (record.go); the
// uncordon's used to drop the cordon from it at once, so a leader that
// stopped between the two writes (killed, or its Lease's fence refusing
// the Node write and the undo of the record), or whose record write landed
// after a read-back that did not show it, left the next leader a record
// without the cordon the Node still carried: taken for someone else's
// (an admin's), it was never lifted. Now the first write carries what the
// uncordon writes beside it (a finish, a failure, a clock) and keeps the
// cordon; the second, once the Node is known not to carry the operator's
// cordon (lifted by this write, read back after a lost answer, or found
// lifted already), drops it. A leader stopped anywhere between leaves a
// record that holds the cordon (and so the node's slot), and the next
// leader's decision lifts it (StepUncordon), or finds it lifted and only
// drops it from the record.
//
// The Node the uncordon decides from is the Node as the API server holds
// it, not the copy overlaid with the record (whose cordon is the
// record's, not always the Node's): a record still holding the operator's
// cordon over a Node that an admin cordoned since must never lift the
// admin's. Only what the cordon made the node before it
// (drain.AnnotationSchedulableBefore) is the record's: the node may write
// its own annotations.

// UncordonRecord is the change of a node's record that an uncordon
// writing also (its annotations; nil values remove) makes: before its Node
// write (lifted false), also's keys, the cordon's record kept as it is;
// once the Node is known not to carry the operator's cordon (lifted), the
// cordon's record removed.
func UncordonRecord(also map[string]any, lifted bool) map[string]any {
	if lifted {
		return map[string]any{drain.AnnotationCordonedBy: nil, drain.AnnotationSchedulableBefore: nil}
	}
	rec := maps.Clone(also)
	if rec == nil {
		rec = map[string]any{}
	}
	delete(rec, drain.AnnotationCordonedBy)
	delete(rec, drain.AnnotationSchedulableBefore)
	return rec
}

// CordonToLift is what an uncordon of owner's cordon decides from: node,
// the Node as the API server holds it, carrying owner's cordon record
// (lift), with the record's schedulable-before (recorded: the Node
// overlaid with the record, Keys.Overlay); lift false when the Node
// carries no cordon of owner's (lifted already, or another's: an admin's,
// another prefix's), which is then left as it is.
func CordonToLift(node, recorded *corev1.Node, owner string) (seen *corev1.Node, lift bool) {
	// trust: uo.node.cordon-record
	if node == nil || drain.CordonedBy(node.Annotations) != owner {
		return nil, false
	}
	seen = node.DeepCopy()
	if recorded != nil && drain.CordonedBy(recorded.Annotations) == owner {
		if v, ok := recorded.Annotations[drain.AnnotationSchedulableBefore]; ok {
			seen.Annotations[drain.AnnotationSchedulableBefore] = v
		} else {
			delete(seen.Annotations, drain.AnnotationSchedulableBefore)
		}
	}
	return seen, true
}

// nodeAsIs is node n as the API server holds it, n being a copy
// overlaid with the record: the informer's copy of n's resource version,
// else a GET.
func (c *controller) nodeAsIs(ctx context.Context, n *corev1.Node) (*corev1.Node, error) {
	if c.store != nil {
		if o, ok, _ := c.store.GetByKey(n.Name); ok {
			if cached, isNode := o.(*corev1.Node); isNode && cached.ResourceVersion == n.ResourceVersion {
				return cached.DeepCopy(), nil
			}
		}
	}
	got, err := c.kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	c.m.reads.WithLabelValues("get").Inc()
	if err != nil {
		return nil, fmt.Errorf("read node %s before lifting the operator's cordon: %w", n.Name, err)
	}
	return got, nil
}

// uncordonSeen lifts the operator's cordon of n (drain.UncordonSeen),
// writing also in the same request, between the record's two writes. It
// returns the Node as written, nil when the Node carried no cordon of the
// operator's (nothing written on it; its record's cordon dropped all the
// same).
func (c *controller) uncordonSeen(ctx context.Context, n *corev1.Node, also drain.Meta) (*corev1.Node, error) {
	undo, err := c.record(ctx, n.Name, UncordonRecord(also.Annotations, false))
	if err != nil {
		return nil, err
	}
	owner := c.keys.ownerOn(n)
	node, err := c.nodeAsIs(ctx, n)
	if err != nil {
		undo()
		return nil, err
	}
	var written *corev1.Node
	if seen, lift := CordonToLift(node, n, owner); lift {
		written, err = drain.UncordonSeen(ctx, c.kube, n.Name, seen, owner, also)
		if err != nil { // the uncordon may have landed, its answer lost (lostwrite.go); unknown, the record keeps the cordon
			landed := func(n *corev1.Node) bool { return CarriesUncordon(n, owner, also) }
			if written, err = c.afterFailedWrite(ctx, n.Name, err, landed, undo, false); err != nil {
				return nil, err
			}
		}
	}
	// The Node carries no cordon of the operator's any more: the record's goes.
	if _, err := c.record(ctx, n.Name, UncordonRecord(nil, true)); err != nil {
		c.o.Log.Error("drop the lifted cordon from the controller's record (kept: the next turn lifts it again)", "node", n.Name, "err", err)
	}
	return c.recorded(written), nil
}
