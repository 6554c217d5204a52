package updateoperator

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/internal/wallclock"
)

// fail counts a failure, lifts the operator's cordon and tells the agent
// to reset its host (reset-state), in one write. n is the Node the
// decision read.
func (c *controller) fail(ctx context.Context, n *corev1.Node, v NodeView, reason string) error {
	now := stamp(wallclock.Now())
	ann := map[string]any{c.keys.Wanted(): string(IntentReset), c.keys.Key(KeyTransition): now,
		c.keys.Key(KeyFailures): strconv.Itoa(v.Failures + 1), c.keys.Key(KeyLastFailure): now,
		c.keys.Key(KeyReason): reason, c.keys.Key(KeyWorkloads): nil, c.keys.Key(KeyDrainStarted): nil, c.keys.Key(KeyAhead): nil,
		c.keys.Key(KeyTargetVersion): nil}
	labels := c.hooksOff(ann) // the next attempt's hooks answer anew
	if v.CordonedByUs {
		written, err := c.uncordonSeen(ctx, n, drain.Meta{Labels: labels, Annotations: ann})
		if err != nil {
			return err
		}
		if written == nil { // not the operator's cordon after all: the failure is still recorded
			return c.failWrite(ctx, v, labels, ann, reason)
		}
		c.wrote(v.Name, written.ResourceVersion)
		return c.failed(ctx, v, reason)
	}
	return c.failWrite(ctx, v, labels, ann, reason)
}

// hooksOff adds to ann the removal of every hook's answer and returns the
// removal of the hooks' labels: a failed attempt's hooks stop, and a
// "true" one of them said stays no answer for the next attempt.
func (c *controller) hooksOff(ann map[string]any) (labels map[string]any) {
	for _, k := range append(append([]string{}, c.o.BeforeRebootChecks...), c.o.AfterRebootChecks...) {
		ann[k] = nil
	}
	return map[string]any{c.keys.Key(KeyBeforeReboot): nil, c.keys.Key(KeyAfterReboot): nil}
}

// failWrite writes a failure's labels and annotations without an uncordon.
func (c *controller) failWrite(ctx context.Context, v NodeView, labels, ann map[string]any, reason string) error {
	if err := c.patch(ctx, v.Name, labels, ann); err != nil {
		return err
	}
	return c.failed(ctx, v, reason)
}

// failed counts and reports a failure written.
func (c *controller) failed(ctx context.Context, v NodeView, reason string) error {
	c.m.failures.WithLabelValues(v.Name).Inc()
	c.ev.emit(ctx, v.Name, corev1.EventTypeWarning, ReasonFailed, "update failed (failure %d): %s", v.Failures+1, reason)
	return nil
}

// drainForReboot cordons and drains the node (under dctx, which a failed
// perform-update cancels), recording the workloads it takes pods from;
// perform, when not nil, are the annotations that want perform-update,
// written in the cordon's own request (performBesideDrain). Once the drain
// ended, the reboot is wanted at once when the host has performed already
// (rebootIfPerformed), else by the turn that sees it perform (drains.go).
// A failed drain is a failure; a stopped one is left to the turn, which
// fails the update on the agent's error.
func (c *controller) drainForReboot(ctx, dctx context.Context, n *corev1.Node, perform map[string]string) {
	node := n.Name
	defer c.endDrain(node)
	summary, cordoned, err := c.drain(dctx, n, perform)
	switch {
	case ctx.Err() != nil:
		return // the next leader takes it from here: the node's annotations say where it is
	case dctx.Err() != nil:
		return // stopped: the update failed on the host
	case err != nil:
		c.drainFailed(ctx, node, err)
		return
	}
	if len(c.o.BeforeRebootChecks) > 0 {
		if err := c.patch(ctx, node, map[string]any{c.keys.Key(KeyBeforeReboot): "true"}, nil); err != nil {
			c.o.Log.Error("label for the before-reboot hooks", "node", node, "err", err)
			return
		}
		c.ev.emit(ctx, node, corev1.EventTypeNormal, ReasonHooks, "%s; waiting for the before-reboot hooks: %s", summary, strings.Join(c.o.BeforeRebootChecks, ", "))
	}
	c.noteDrained(node, drainDone{transition: cordoned.Annotations[c.keys.Key(KeyTransition)], summary: summary})
	if err := c.rebootIfPerformed(ctx, cordoned); err != nil {
		c.o.Log.Error("want reboot-update after the drain", "node", node, "err", err)
	}
}

// performBesideDrain wants perform-update on n in the write that cordons
// it, and drains it while the host performs: one write, and the drain
// starts with the intent instead of a turn later.
func (c *controller) performBesideDrain(ctx, dctx context.Context, n *corev1.Node) {
	c.drainForReboot(ctx, dctx, n, map[string]string{c.keys.Wanted(): string(IntentPerform), c.keys.Key(KeyTransition): stamp(wallclock.Now())})
}

// rebootIfPerformed takes the step after a drain that ended when the
// host has performed already: it wants reboot-update from the drain's own
// goroutine (the turns skip the node while it drains), one turn sooner
// than the turn its end wakes. Any other step is left to that turn.
// cordoned is the Node as the drain's cordon wrote (or found) it.
func (c *controller) rebootIfPerformed(ctx context.Context, cordoned *corev1.Node) error {
	n := c.recorded(c.latest(cordoned)) // the cache's copy once it is newer: the host's report
	v := c.view(n)
	s := Next(v, c.o.Policy, wallclock.Now())
	if s.Kind != StepWant || s.Wanted != IntentReboot {
		return nil
	}
	return c.do(ctx, n, v, s)
}

// drainFailed records a failed drain as the update's failure, on the Node
// read again (the drain's cordon is on it).
func (c *controller) drainFailed(ctx context.Context, node string, err error) {
	n, gerr := c.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if gerr != nil {
		c.o.Log.Error("read node after a failed drain", "node", node, "err", gerr)
		return
	}
	n = c.recorded(n)
	v := c.keys.View(n, c.o.NodeName)
	if ferr := c.fail(ctx, n, v, err.Error()); ferr != nil {
		c.o.Log.Error("record a failed drain", "node", node, "err", ferr)
		return
	}
	c.ended(ctx, v, "", false, false) // the pause counts from a failure too; a refused drain is not the release's

}

// drain cordons and drains n (writing also in the cordon's request),
// records the workloads it takes pods from, and returns what it did in
// words and the Node as its writes left it. The cordon comes first, so
// the pods listed after it are all the drain will take (none schedules
// there meanwhile) and a perform-update wanted with it goes out at once;
// the workloads are written before any eviction, in a write of their own
// when there are some. n is the Node as the turn that decided the drain
// read it (the cache holding the controller's own writes): a drain resumed
// after a restart finds the first one's record there.
func (c *controller) drain(ctx context.Context, n *corev1.Node, also map[string]string) (summary string, cordoned *corev1.Node, err error) {
	node := n.Name
	cordoned, started, err := c.cordon(ctx, c.recorded(c.latest(n)), also)
	if err != nil {
		return "", nil, err
	}
	workloads, failing, err := drainedWorkloads(ctx, c.kube, node)
	if err != nil {
		return "", nil, err
	}
	if len(failing) > 0 {
		c.o.Log.Info("not waiting after the reboot for workloads failing before the drain", "node", node, "workloads", failing)
	}
	workloads = union(workloads, c.keys.Workloads(cordoned)) // a drain resumed after a restart keeps the first one's
	if list := strings.Join(workloads, ","); list != cordoned.Annotations[c.keys.Key(KeyWorkloads)] {
		if cordoned, err = c.patchNode(ctx, node, nil, map[string]any{c.keys.Key(KeyWorkloads): list}); err != nil {
			return "", nil, fmt.Errorf("record the workloads drained off %s: %w", node, err)
		}
	}
	opts := c.o.Drain
	opts.Timeout = DrainBudget(opts.Timeout, started, wallclock.Now())
	res, err := drain.Drain(ctx, c.kube, node, opts)
	if err != nil {
		return "", nil, fmt.Errorf("drain: %w", err)
	}
	summary = fmt.Sprintf("cordoned and drained (%d pods evicted; %d workloads to be ready again after the reboot", len(res.Evicted), len(workloads))
	if len(failing) > 0 {
		summary += fmt.Sprintf("; not waited for, failing before the drain: %s", strings.Join(failing, ", "))
	}
	return summary + ")", cordoned, nil
}

// cordon cordons n as the drain's first step, recording when the drain
// began (a drain resumed after a restart keeps the first one's start, and
// so its deadline) and writing also in the same request; it returns the
// Node as written (n when it was cordoned so already) and the drain's
// start.
func (c *controller) cordon(ctx context.Context, n *corev1.Node, also map[string]string) (*corev1.Node, time.Time, error) {
	started := wallclock.Now()
	if t, err := time.Parse(time.RFC3339, n.Annotations[c.keys.Key(KeyDrainStarted)]); err == nil && t.Before(started) {
		started = t
	}
	extra := map[string]string{c.keys.Key(KeyDrainStarted): stamp(started)}
	maps.Copy(extra, also)
	owner := c.keys.ownerOn(n)
	rec := map[string]any{drain.AnnotationCordonedBy: owner, drain.AnnotationSchedulableBefore: schedulableBefore(n, owner)}
	for k, v := range extra {
		rec[k] = v
	}
	undo, err := c.record(ctx, n.Name, rec)
	if err != nil {
		return nil, started, err
	}
	written, err := drain.CordonSeen(ctx, c.kube, n.Name, n, owner, extra)
	if err != nil { // the cordon may have landed, its answer lost (lostwrite.go): a cordon kept is lifted later
		landed := func(n *corev1.Node) bool { return CarriesCordon(n, owner, extra) }
		if written, err = c.afterFailedWrite(ctx, n.Name, err, landed, undo, true); err != nil {
			return nil, started, err
		}
	}
	if written != nil { // the cordon's record as the drain wrote it (it may have read the Node again)
		if _, err := c.record(ctx, n.Name, map[string]any{drain.AnnotationCordonedBy: written.Annotations[drain.AnnotationCordonedBy],
			drain.AnnotationSchedulableBefore: written.Annotations[drain.AnnotationSchedulableBefore]}); err != nil {
			c.o.Log.Error("record the cordon", "node", n.Name, "err", err)
		}
		written = c.recorded(written)
	}
	if i := also[c.keys.Wanted()]; i != "" {
		c.ev.emit(ctx, n.Name, corev1.EventTypeNormal, ReasonIntent, "intent %s; cordoned, the drain runs beside it", i)
	}
	if written == nil {
		return n, started, nil
	}
	c.wrote(n.Name, written.ResourceVersion)
	return written, started, nil
}

// schedulableBefore is what a cordon of n by owner records as
// drain.AnnotationSchedulableBefore (as drain.CordonSeen writes it).
func schedulableBefore(n *corev1.Node, owner string) string {
	// trust: uo.node.unschedulable
	by := drain.CordonedBy(n.Annotations)
	switch {
	case by == owner:
		return n.Annotations[drain.AnnotationSchedulableBefore]
	case n.Spec.Unschedulable && by == "":
		return "false"
	}
	return "true"
}

func union(a, b []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range append(a, b...) {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}
