package updateoperator

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/kube"
)

// CordonOwner is the owner the operator's cordons are recorded under
// (drain.AnnotationCordonedBy) with the default prefix; Keys.CordonOwner
// gives each prefix's. Only the controller's own cordons are ever lifted.
const CordonOwner = "slipway-update-operator"

// CordonOwner is the owner of the cordons of a controller speaking k's
// prefix. Each prefix has its own: a controller manages every Node, so two
// operators of different prefixes in one cluster (one per OS family) would
// otherwise lift each other's cordons mid-drain.
func (k Keys) CordonOwner() string {
	if k.Prefix == DefaultPrefix {
		return CordonOwner
	}
	return CordonOwner + "." + k.Prefix
}

// cordonedByUs reports whether the cordon record on a is this prefix's:
// its own owner, or the shared owner older versions recorded for every
// prefix, on a node whose drain this prefix's controller started.
func (k Keys) cordonedByUs(a map[string]string) bool {
	by := drain.CordonedBy(a)
	return by == k.CordonOwner() || by == CordonOwner && a[k.Key(KeyDrainStarted)] != ""
}

// ownerOn is the owner this prefix's cordon of n is recorded under: the
// record's own when it is this prefix's (an older version's shared owner,
// too: a drain resumed or an uncordon after an upgrade of the operator),
// else this prefix's.
func (k Keys) ownerOn(n *corev1.Node) string {
	if n != nil && k.cordonedByUs(n.Annotations) {
		return drain.CordonedBy(n.Annotations)
	}
	return k.CordonOwner()
}

// View reads a Node's protocol annotations under k. A value that cannot be
// read sets Invalid, naming the key and what is allowed.
func (k Keys) View(n *corev1.Node, own string) NodeView {
	a := n.Annotations
	// trust: uo.node.current-version
	_, reports := a[k.Key(KeyCurrentVersion)]
	v := NodeView{
		Reports: reports,
		Name:    n.Name,
		// trust: uo.node.update-available
		UpdateAvailable: a[k.UpdateAvailable()] == "true",
		// trust: uo.node.ready
		Ready: nodeReady(n),
		// trust: uo.node.cordon-record
		CordonedByUs: k.cordonedByUs(a),
		// trust: uo.node.unschedulable
		UnmarkedCordon: n.Spec.Unschedulable && drain.CordonedBy(a) == "",
		// trust: uo.node.exclude
		Excluded: n.Labels[k.Exclude()] == "true",
		// trust: uo.node.interface-version
		Labelled: n.Labels[k.InterfaceVersion()] != "",
		// trust: uo.node.action-state
		Spoke: a[k.State()] != "",
		// trust: uo.node.action-active
		OldAgent: a[k.Active()] == string(IntentStabilize) && a[k.State()] == string(StateReady) && a[k.Key(KeyCurrentVersion)] == "",
		Own:      own != "" && n.Name == own,
		Ahead:    a[k.Key(KeyAhead)] == "true",
		// trust: uo.node.current-version
		Current: a[k.Key(KeyCurrentVersion)],
		Target:  a[k.Key(KeyTargetVersion)],
		// trust: uo.node.available-version
		Available: a[k.Key(KeyAvailableVersion)],
		// trust: uo.node.staged-version
		Staged: a[k.Key(KeyStagedVersion)],
		// trust: uo.node.reason
		Reason: a[k.Key(KeyReason)],
	}
	var errs []string
	note := func(key string, err error) {
		if err != nil {
			errs = append(errs, fmt.Sprintf("annotation %s: %v", key, err))
		}
	}
	var err error
	// An unreadable action-wanted is not written over: the node may be in
	// the middle of an update (rebooting, even); it is held, with a reason.
	v.Wanted, err = ParseIntent(a[k.Wanted()])
	v.WantedInvalid = err != nil
	note(k.Wanted(), err)
	// trust: uo.node.action-active
	v.Active, err = ParseIntent(a[k.Active()])
	note(k.Active(), err)
	// trust: uo.node.action-state
	v.State, err = ParseState(a[k.State()])
	note(k.State(), err)
	if s := a[k.Key(KeyFailures)]; s != "" {
		v.Failures, err = strconv.Atoi(s)
		if err == nil && v.Failures < 0 {
			err = fmt.Errorf("%d is negative", v.Failures)
		}
		note(k.Key(KeyFailures), err)
	}
	for key, into := range map[string]*time.Time{KeyLastFailure: &v.LastFailure, KeyTransition: &v.Transition, KeyFinished: &v.Finished} {
		if s := a[k.Key(key)]; s != "" {
			*into, err = time.Parse(time.RFC3339, s)
			note(k.Key(key), err)
		}
	}
	v.Invalid = strings.Join(errs, "; ")
	return v
}

func nodeReady(n *corev1.Node) bool {
	// trust: uo.node.ready
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Workloads lists the annotation of the workloads drained off a node.
func (k Keys) Workloads(n *corev1.Node) []string {
	s := n.Annotations[k.Key(KeyWorkloads)]
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// stamp formats t for the time annotations.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// patch is patchNodeRV for the controller: the write's resource version is
// recorded, so no turn decides on an older Node (cache.go).
func (c *controller) patch(ctx context.Context, node string, labels, annotations map[string]any) error {
	_, err := c.patchNode(ctx, node, labels, annotations)
	return err
}

// patchNode is patch returning the Node as written (nil when nothing was).
func (c *controller) patchNode(ctx context.Context, node string, labels, annotations map[string]any) (*corev1.Node, error) {
	undo, err := c.record(ctx, node, annotations)
	if err != nil {
		return nil, err
	}
	n, err := patchNodeRV(ctx, c.kube, node, labels, annotations)
	if err != nil { // its answer may be all that was lost (lostwrite.go): an intent kept holds its slot
		landed := func(n *corev1.Node) bool { return Carries(n, labels, annotations) }
		if n, err = c.afterFailedWrite(ctx, node, err, landed, undo, true); err != nil {
			return nil, err
		}
		return c.recorded(n), nil
	}
	if n != nil {
		c.wrote(node, n.ResourceVersion)
	}
	return c.recorded(n), nil
}

// patchNodeRV writes labels and annotations of a node in one merge patch
// (nil values remove keys) and returns the Node as written (its resource
// version; nil when nothing was written).
func patchNodeRV(ctx context.Context, c *kube.Clientset, node string, labels, annotations map[string]any) (*corev1.Node, error) {
	meta := map[string]any{}
	if len(labels) > 0 {
		meta["labels"] = labels
	}
	if len(annotations) > 0 {
		meta["annotations"] = annotations
	}
	if len(meta) == 0 {
		return nil, nil
	}
	data, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return nil, err
	}
	n, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, data, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("patch node %s: %w", node, err)
	}
	return n, nil
}

// CordonedSince is when the operator cordoned a node it holds cordoned: the
// drain's start, written with the cordon (the last transition for a cordon
// written without one). ok is false for a node the operator did not cordon,
// whoever else did.
func (k Keys) CordonedSince(v NodeView, a map[string]string) (since time.Time, ok bool) {
	if !v.CordonedByUs {
		return time.Time{}, false
	}
	if t, err := time.Parse(time.RFC3339, a[k.Key(KeyDrainStarted)]); err == nil {
		return t, true
	}
	if t, err := time.Parse(time.RFC3339, a[k.Key(KeyTransition)]); err == nil {
		return t, true
	}
	return time.Time{}, false
}

// CordonLimit is how long a cordon of the operator may last: the drain
// runs beside perform-update, and the reboot is wanted within the longer
// of the drain's timeout and perform-update's (which bounds the
// before-reboot hooks too); then the reboot's (reboot-update until back
// Ready), after which the controller fails the update and lifts the cordon.
func CordonLimit(drain time.Duration, t Timeouts) time.Duration {
	return max(drain, t.Perform) + t.Reboot
}
