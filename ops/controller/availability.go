package controller

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/process"
	"slipway.dev/slipway/ops/protocol"
)

// The channel's budget counts its nodes that are down without a slot
// (plan.Unavailable): the controller's one watch of every Node (nodeInformer)
// keeps of each its Ready condition and slipway's cordon beside its
// metadata, and a change of either wakes the fleet view of every channel:
// a node back Ready gives its capacity back at once. The kubelet's
// periodic status reports change neither and wake nothing.

// nodeInformer is the controller's one watch of every Node, each stripped
// as it arrives (stripNode) to its metadata, its Ready condition and its
// unschedulable flag. It serves the budget (availability) and everything
// that reads Node metadata (fold.go, views.go, servers.go). One watch, not
// a metadata watch beside a Node watch: every Node event reaches each
// watcher of Nodes, so a second watch doubled what the API server sends
// the controller for every Node write of the fleet.
func (ctl *Controller) nodeInformer() (cache.SharedIndexInformer, error) {
	inf := process.NewInformer(ctl.kube.CoreV1().Nodes(), &corev1.Node{}, ctl.opts.Resync, func(*metav1.ListOptions) {})
	if err := inf.SetTransform(stripNode); err != nil {
		return nil, err
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*corev1.Node)
			n, ok2 := cur.(*corev1.Node)
			if !ok1 || !ok2 || !ctl.elected.Load() {
				return
			}
			if availabilityOf(o) != availabilityOf(n) {
				ctl.enqueueAll()
			}
			ctl.nodeMetaChanged(&o.ObjectMeta, &n.ObjectMeta)
		},
		DeleteFunc: ctl.forgetNode,
	})
	ctl.nodes = inf.GetStore()
	return inf, err
}

// stripNode keeps of a Node its metadata (without managedFields), its
// Ready condition and its unschedulable flag.
func stripNode(o any) (any, error) {
	n, ok := o.(*corev1.Node)
	if !ok {
		return o, nil
	}
	out := &corev1.Node{ObjectMeta: n.ObjectMeta}
	out.ManagedFields = nil
	out.Spec.Unschedulable = n.Spec.Unschedulable
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			out.Status.Conditions = []corev1.NodeCondition{{Type: c.Type, Status: c.Status, LastTransitionTime: c.LastTransitionTime}}
		}
	}
	return out, nil
}

// availabilityOf is what the budget reads of n.
func availabilityOf(n *corev1.Node) plan.Availability {
	a := plan.Availability{Name: n.Name, CordonedBySlipway: n.Spec.Unschedulable && drain.CordonedBy(n.Annotations) == protocol.CordonOwner}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			a.Ready = c.Status == corev1.ConditionTrue
			if !a.Ready {
				a.ReadySince = c.LastTransitionTime.Time
			}
		}
	}
	return a
}

// availability is what the budget reads of the nodes named, from the
// controller's cache; a node it has not seen yet counts as available.
func (ctl *Controller) availability(names []string) []plan.Availability {
	out := make([]plan.Availability, 0, len(names))
	for _, name := range names {
		a := plan.Availability{Name: name, Ready: true}
		if ctl.nodes != nil {
			if o, ok, _ := ctl.nodes.GetByKey(name); ok {
				if n, ok := o.(*corev1.Node); ok {
					a = availabilityOf(n)
				}
			}
		}
		out = append(out, a)
	}
	return out
}

// nodeNames are the names of nodes.
func nodeNames(nodes []plan.Node) []string {
	out := make([]string, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, n.Name)
	}
	return out
}

// errBudgetSpent is a drain held back: the channel's other nodes down
// spend its concurrency (plan.MayCordon).
type errBudgetSpent struct {
	concurrency int
	spent       []plan.Down
}

func (e *errBudgetSpent) Error() string {
	return fmt.Sprintf("%s of this channel's other nodes are down (concurrency %d)", describeDown(e.spent), e.concurrency)
}

// describeDown names the nodes of down and why.
func describeDown(down []plan.Down) string {
	names := make([]string, 0, len(down))
	for _, d := range down {
		names = append(names, d.Node+" ("+d.Why+")")
	}
	return strings.Join(names, ", ")
}

// mayCordon tells whether slot's node may be cordoned now, its channel's
// other nodes as the cache has them (plan.MayCordon); the nodes are those
// the channel's selector picks from the controller's Node metadata.
func (ctl *Controller) mayCordon(s plan.Settings, slot v1.Slot) error {
	var names []string
	for _, m := range ctl.nodeSnapshot() {
		if s.Selector.Matches(labels.Set(m.Labels)) {
			names = append(names, m.Name)
		}
	}
	if ok, spent := plan.MayCordon(s, slot.Node, ctl.availability(names)); !ok {
		return &errBudgetSpent{concurrency: s.Concurrency, spent: spent}
	}
	return nil
}

// downEvents records, once per node and down spell, a Warning Event on ch
// for each node of down NotReady for longer than nodeReadyTimeout: it
// holds the channel's capacity, maybe for good.
func (ctl *Controller) downEvents(ch *v1.UpdateChannel, fc *fleetCache, s plan.Settings, down []plan.Down, now time.Time) {
	long := plan.DownTooLong(down, s.NodeReadyTimeout, now)
	seen := map[string]time.Time{}
	for _, d := range long {
		seen[d.Node] = d.Since
		if since, told := fc.downLong[d.Node]; told && since.Equal(d.Since) {
			continue
		}
		ctl.log.Warn("a node down for long holds the channel's capacity", "channel", ch.Name, "node", d.Node, "since", d.Since)
		ctl.recorder.Eventf(ch, corev1.EventTypeWarning, "NodeDownTooLong",
			"node %s has been NotReady since %s (longer than nodeReadyTimeout %s) and spends one of this channel's %d slots: delete its Node if the machine is gone for good, or leave it out of the channel's nodeSelector to roll on without it",
			d.Node, d.Since.UTC().Format(time.RFC3339), s.NodeReadyTimeout, s.Concurrency)
	}
	fc.downLong = seen
}
