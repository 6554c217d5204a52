package updateoperator

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/drain"
)

// fail counts a failure, lifts the operator's cordon and tells the agent
// to reset its host (reset-state), in one write. n is the Node the
// decision read.
func (c *controller) fail(ctx context.Context, n *corev1.Node, v NodeView, reason string) error {
	now := stamp(time.Now())
	ann := map[string]any{c.keys.Wanted(): string(IntentReset), c.keys.Key(KeyTransition): now,
		c.keys.Key(KeyFailures): strconv.Itoa(v.Failures + 1), c.keys.Key(KeyLastFailure): now,
		c.keys.Key(KeyReason): reason, c.keys.Key(KeyWorkloads): nil, c.keys.Key(KeyDrainStarted): nil, c.keys.Key(KeyAhead): nil,
		c.keys.Key(KeyTargetVersion): nil}
	labels := c.hooksOff(ann) // the next attempt's hooks answer anew
	if v.CordonedByUs {
		written, err := drain.UncordonSeen(ctx, c.kube, v.Name, n, c.keys.ownerOn(n), drain.Meta{Labels: labels, Annotations: ann})
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
// the turn after it ends wants reboot-update once the host has performed
// the update (drains.go). A failed drain is a failure; a stopped one is
// left to the turn, which fails the update on the agent's error.
func (c *controller) drainForReboot(ctx, dctx context.Context, n *corev1.Node) {
	node := n.Name
	var done *drainDone
	defer func() { c.endDrain(node, done) }()
	summary, err := c.drain(dctx, n)
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
	done = &drainDone{transition: n.Annotations[c.keys.Key(KeyTransition)], summary: summary}
}

// drainFailed records a failed drain as the update's failure, on the Node
// read again (the drain's cordon is on it).
func (c *controller) drainFailed(ctx context.Context, node string, err error) {
	n, gerr := c.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if gerr != nil {
		c.o.Log.Error("read node after a failed drain", "node", node, "err", gerr)
		return
	}
	if ferr := c.fail(ctx, n, c.keys.View(n, c.o.NodeName), err.Error()); ferr != nil {
		c.o.Log.Error("record a failed drain", "node", node, "err", ferr)
	}
}

// drain cordons and drains n, recording the workloads it takes pods from,
// and returns what it did in words. n is the Node as the turn that decided
// the drain read it (the cache holding the controller's own writes): a
// drain resumed after a restart finds the first one's record there.
func (c *controller) drain(ctx context.Context, n *corev1.Node) (string, error) {
	node := n.Name
	workloads, failing, err := drainedWorkloads(ctx, c.kube, node)
	if err != nil {
		return "", err
	}
	if len(failing) > 0 {
		c.o.Log.Info("not waiting after the reboot for workloads failing before the drain", "node", node, "workloads", failing)
	}
	n = c.latest(n) // the agent acknowledges perform-update meanwhile
	started := time.Now()
	workloads = union(workloads, c.keys.Workloads(n)) // a drain resumed after a restart keeps the first one's
	if t, err := time.Parse(time.RFC3339, n.Annotations[c.keys.Key(KeyDrainStarted)]); err == nil && t.Before(started) {
		started = t // and its deadline
	}
	extra := map[string]string{c.keys.Key(KeyWorkloads): strings.Join(workloads, ","), c.keys.Key(KeyDrainStarted): stamp(started)}
	written, err := drain.CordonSeen(ctx, c.kube, node, n, c.keys.ownerOn(n), extra)
	if err != nil {
		return "", err
	}
	if written != nil {
		c.wrote(node, written.ResourceVersion)
	}
	opts := c.o.Drain
	opts.Timeout = DrainBudget(opts.Timeout, started, time.Now())
	res, err := drain.Drain(ctx, c.kube, node, opts)
	if err != nil {
		return "", fmt.Errorf("drain: %w", err)
	}
	msg := fmt.Sprintf("cordoned and drained (%d pods evicted; %d workloads to be ready again after the reboot", len(res.Evicted), len(workloads))
	if len(failing) > 0 {
		msg += fmt.Sprintf("; not waited for, failing before the drain: %s", strings.Join(failing, ", "))
	}
	return msg + ")", nil
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
