package updateoperator

import (
	"context"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/internal/wallclock"
)

// sync reads every Node (from the cache once it holds the controller's
// own last writes, cache.go), decides, and writes the results.
func (c *controller) sync(ctx context.Context) error {
	items, err := c.readNodes(ctx)
	if err != nil {
		return err
	}
	if err := c.importRecords(ctx, items); err != nil {
		return err
	}
	now := wallclock.Now() // the annotations' and the fleet state's times are compared with it
	nodes := map[string]*corev1.Node{}
	views := make([]NodeView, 0, len(items))
	for i := range items {
		// The controller's keys are its record's (record.go): a node
		// cannot take, hold or free a slot, or move a clock, by writing them.
		n := c.keepRecord(ctx, &items[i])
		items[i] = *n
		nodes[n.Name] = n
		c.ev.remember(n)
		c.label(ctx, n)
		v := c.view(n)
		if c.needsHealth(v) {
			v.WorkloadsReady = c.healthy(ctx, n)
		}
		views = append(views, v)
	}
	c.report(items, views)
	c.forgetDrains(nodes)
	c.fleet.forget(ctx, nodes)
	// Each node's step touches only that node: a wave's steps go out at once.
	parallel(views, func(v NodeView) {
		if c.isDraining(v.Name) {
			if StopDrain(v) {
				c.stopDrain(v.Name)
			}
			return
		}
		if err := c.do(ctx, nodes[v.Name], v, Next(v, c.o.Policy, now)); err != nil {
			c.o.Log.Error("step", "node", v.Name, "err", err)
		}
	})
	c.freed(nodes, views)
	if err := c.markBlocked(ctx, views); err != nil {
		return err
	}
	fleet := c.judge(ctx, c.brake(ctx), views, now)
	start, why := Starts(views, c.o.Policy, fleet, now)
	if err := c.start(ctx, nodes, views, start); err != nil {
		return err
	}
	if why != "" {
		c.o.Log.Debug("no node starts", "why", why)
	}
	parallel(PrepareAhead(views, c.o.Policy, fleet, now, start), func(name string) {
		// trust: uo.node.available-version
		if err := c.wantAhead(ctx, name, nodes[name].Annotations[c.keys.Key(KeyAvailableVersion)]); err != nil {
			c.o.Log.Error("prepare ahead", "node", name, "err", err)
		}
	})
	return nil
}

// needsHealth: the node is back and uncordoned, waiting for its workloads.
func (c *controller) needsHealth(v NodeView) bool {
	return v.Wanted == IntentReboot && v.Active == IntentReboot && v.State == StateReady && v.Ready && !v.CordonedByUs
}

func (c *controller) healthy(ctx context.Context, n *corev1.Node) bool {
	ok, why, err := workloadsReady(ctx, c.kube, c.keys.Workloads(n))
	if err != nil {
		c.o.Log.Warn("workload health", "node", n.Name, "err", err)
		return false
	}
	if !ok {
		c.o.Log.Debug("waiting for workloads", "node", n.Name, "why", why)
	}
	return ok
}

// label gives a node whose osImage matches the interface-version label,
// so the agent DaemonSet lands on it.
func (c *controller) label(ctx context.Context, n *corev1.Node) {
	// trust: uo.node.os-image
	if c.images == nil || n.Labels[c.keys.InterfaceVersion()] != "" || n.Labels[c.keys.Exclude()] == "true" ||
		!c.images.MatchString(n.Status.NodeInfo.OSImage) {
		return
	}
	if err := c.patch(ctx, n.Name, map[string]any{c.keys.InterfaceVersion(): InterfaceVersion}, nil); err != nil {
		c.o.Log.Error("label node", "node", n.Name, "err", err)
		return
	}
	c.ev.emit(ctx, n.Name, corev1.EventTypeNormal, ReasonLabelled, "labelled %s=%s (osImage %q) so the agent runs there",
		c.keys.InterfaceVersion(), InterfaceVersion, n.Status.NodeInfo.OSImage)
}

// markBlocked sets Blocked on nodes that run a pod of the blocking selector.
func (c *controller) markBlocked(ctx context.Context, views []NodeView) error {
	if c.o.BlockingPods == "" {
		return nil
	}
	pods, err := c.kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: c.o.BlockingPods})
	if err != nil {
		return fmt.Errorf("list blocking pods (%s): %w", c.o.BlockingPods, err)
	}
	blocked := map[string]bool{}
	for _, p := range pods.Items {
		// trust: uo.pod.blocking
		if p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodPending {
			blocked[p.Spec.NodeName] = true
		}
	}
	for i := range views {
		views[i].Blocked = blocked[views[i].Name]
	}
	return nil
}

// report sets the node gauges.
func (c *controller) report(nodes []corev1.Node, views []NodeView) {
	c.m.nodes.Reset()
	c.m.cordonedSince.Reset()
	c.m.cordonLimit.Set(CordonLimit(c.o.Drain.Timeout, c.o.Policy.Timeouts).Seconds())
	inflight := 0
	for i, v := range views {
		c.m.nodes.WithLabelValues(string(v.State), nodes[i].Annotations[c.keys.Key(KeyCurrentVersion)]).Inc()
		if InFlight(v) {
			inflight++
		}
		if since, ok := c.keys.CordonedSince(v, nodes[i].Annotations); ok {
			c.m.cordonedSince.WithLabelValues(v.Name).Set(float64(since.Unix()))
		}
	}
	c.m.inFlight.Set(float64(inflight))
}

// do carries out one step on one node.
func (c *controller) do(ctx context.Context, n *corev1.Node, v NodeView, s Step) error {
	if v.Invalid == "" && strings.HasPrefix(v.Reason, HeldPrefix) && !(s.Kind == StepStuck && s.Reason == v.Reason) { // the hold is over: its reason goes
		if err := c.patch(ctx, v.Name, nil, map[string]any{c.keys.Key(KeyReason): nil}); err != nil {
			return err
		}
	}
	if s.Kind == StepNone {
		return nil
	}
	c.m.transitions.WithLabelValues(string(s.Kind)).Inc()
	now := stamp(wallclock.Now())
	switch s.Kind {
	case StepPerform:
		go c.performBesideDrain(ctx, c.startDrain(ctx, v.Name), n)
	case StepWant:
		var labels, ann map[string]any
		if s.Wanted == IntentReboot && v.BeforeHook { // the before-reboot hooks said yes
			// Reset in the intent's own write: a stop between two writes
			// would leave a drained node unlabelled with no answer, and
			// the next turn would ask its hooks again.
			labels, ann = c.hookCleared(KeyBeforeReboot, c.o.BeforeRebootChecks)
		}
		why := ""
		if s.Wanted == IntentReboot && !v.BeforeHook { // the drain's Event and the intent's, in one
			why = c.drainSummary(v.Name)
		}
		return c.want(ctx, v.Name, s.Wanted, why, labels, ann)
	case StepAfter:
		if err := c.patch(ctx, v.Name, map[string]any{c.keys.Key(KeyAfterReboot): "true"}, nil); err != nil {
			return err
		}
		c.ev.emit(ctx, v.Name, corev1.EventTypeNormal, ReasonHooks, "waiting for the after-reboot hooks: %s", strings.Join(c.o.AfterRebootChecks, ", "))
	case StepDrain:
		go c.drainForReboot(ctx, c.startDrain(ctx, v.Name), n, nil)
	case StepUncordon:
		return c.uncordon(ctx, n, v, now)
	case StepAdopt:
		if err := c.patch(ctx, v.Name, nil, map[string]any{drain.AnnotationCordonedBy: c.keys.CordonOwner(), drain.AnnotationSchedulableBefore: "true",
			c.keys.Key(KeyTransition): now}); err != nil {
			return err
		}
		c.ev.emit(ctx, v.Name, corev1.EventTypeNormal, ReasonAdopted, "took over the old operator's cordon (it records none): lifted when this update ends")
	case StepTarget:
		ann := map[string]any{}
		if s.Version != "" {
			ann[c.keys.Key(KeyTargetVersion)] = s.Version
		}
		if s.Stamp {
			ann[c.keys.Key(KeyTransition)] = now
		}
		if err := c.patch(ctx, v.Name, nil, ann); err != nil {
			return err
		}
		c.ev.emit(ctx, v.Name, corev1.EventTypeNormal, ReasonTargetAdopted, "%s", s.Reason)
	case StepFinish:
		ann := c.finished(now)
		if s.Reason != "" {
			ann[c.keys.Key(KeyReason)] = s.Reason
		}
		var labels map[string]any
		if v.AfterHook { // in the finish's own write: a stop between two writes would leave the hooks' answers for the next update
			var hookAnn map[string]any
			labels, hookAnn = c.hookCleared(KeyAfterReboot, c.o.AfterRebootChecks)
			maps.Copy(ann, hookAnn)
		}
		written, err := c.patchNode(ctx, v.Name, labels, ann)
		if err != nil {
			return err
		}
		c.ended(ctx, v, "", false, true)
		c.finishedNow(written)
		if s.Reason != "" {
			c.ev.emit(ctx, v.Name, corev1.EventTypeWarning, ReasonStuck, "%s at %s: %s", v.Name, n.Annotations[c.keys.Key(KeyCurrentVersion)], s.Reason)
			return nil
		}
		c.ev.emit(ctx, v.Name, corev1.EventTypeNormal, ReasonSucceeded, "updated to %s", n.Annotations[c.keys.Key(KeyCurrentVersion)])
	case StepFail:
		if err := c.fail(ctx, n, v, s.Reason); err != nil {
			return err
		}
		c.ended(ctx, v, n.Annotations[c.keys.Key(KeyTargetVersion)], s.Release, false)
		return nil
	case StepStuck:
		// trust: uo.node.reason
		if n.Annotations[c.keys.Key(KeyReason)] == s.Reason {
			return nil // said already
		}
		if err := c.patch(ctx, v.Name, nil, map[string]any{c.keys.Key(KeyReason): s.Reason}); err != nil {
			return err
		}
		c.ev.emit(ctx, v.Name, corev1.EventTypeWarning, ReasonStuck, "%s", s.Reason)
	}
	return nil
}

// finished are the annotations that end an update.
func (c *controller) finished(now string) map[string]any {
	return map[string]any{c.keys.Wanted(): string(IntentStabilize), c.keys.Key(KeyTransition): now, c.keys.Key(KeyFinished): now,
		c.keys.Key(KeyFailures): nil, c.keys.Key(KeyLastFailure): nil, c.keys.Key(KeyWorkloads): nil, c.keys.Key(KeyDrainStarted): nil, c.keys.Key(KeyReason): nil,
		c.keys.Key(KeyTargetVersion): nil}
}

// uncordon lifts the operator's cordon. A node back from its reboot whose
// drained workloads are ready already (they run elsewhere again) and with
// no after-reboot hook is finished in the same write; otherwise the next
// step is taken at once when it can be (afterUncordon).
func (c *controller) uncordon(ctx context.Context, n *corev1.Node, v NodeView, now string) error {
	ann := map[string]any{c.keys.Key(KeyTransition): now}
	back := v.Wanted == IntentReboot && v.Active == IntentReboot && v.State == StateReady
	finish := back && len(c.o.AfterRebootChecks) == 0 && c.healthy(ctx, n)
	if finish {
		ann = c.finished(now)
	}
	written, err := c.uncordonSeen(ctx, n, drain.Meta{Annotations: ann})
	if err != nil {
		return err
	}
	lifted := written != nil
	if lifted {
		c.wrote(v.Name, written.ResourceVersion)
	} else if written, err = c.patchNode(ctx, v.Name, nil, ann); err != nil {
		// The operator's cordon was off the Node already (lifted by a
		// leader stopped before its record said so, or an admin's since):
		// what the uncordon writes beside it, written alone.
		return err
	}
	version := n.Annotations[c.keys.Key(KeyCurrentVersion)]
	if finish && written != nil { // one write, one Event
		c.ended(ctx, v, "", false, true)
		c.finishedNow(written)
		c.m.transitions.WithLabelValues(string(StepFinish)).Inc()
		c.ev.emit(ctx, v.Name, corev1.EventTypeNormal, ReasonSucceeded, "updated to %s: back, the operator's cordon lifted", version)
		return nil
	}
	if lifted {
		c.ev.emit(ctx, v.Name, corev1.EventTypeNormal, ReasonUncordoned, "back at %s; lifted the operator's cordon", version)
	} else {
		c.ev.emit(ctx, v.Name, corev1.EventTypeNormal, ReasonUncordoned, "back at %s; the operator's cordon was off the Node already (lifted before the controller's record said so; a cordon of someone else's stays): dropped from the record", version)
	}
	if back {
		return c.afterUncordon(ctx, v.Name, written)
	}
	return nil
}

// afterUncordon takes the step that follows the uncordon of a node back
// from its reboot at once, when it can (no workload to wait for), instead
// of a listing later: the node as the uncordon wrote it (else read again,
// a quorum read that sees the uncordon) is decided on alone.
func (c *controller) afterUncordon(ctx context.Context, node string, n *corev1.Node) error {
	if n == nil {
		var err error
		n, err = c.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		c.m.reads.WithLabelValues("get").Inc()
		if err != nil {
			return fmt.Errorf("read node %s after its uncordon: %w", node, err)
		}
	}
	n = c.recorded(n)
	v := c.keys.View(n, c.o.NodeName)
	c.hookState(&v, n)
	if !c.needsHealth(v) {
		return nil
	}
	v.WorkloadsReady = c.healthy(ctx, n)
	if s := Next(v, c.o.Policy, wallclock.Now()); s.Kind == StepFinish || s.Kind == StepAfter {
		return c.do(ctx, n, v, s)
	}
	return nil
}

// want writes an intent, with the labels and annotations that change
// beside it in the same write.
func (c *controller) want(ctx context.Context, node string, i Intent, why string, labels, annotations map[string]any) error {
	ann := map[string]any{c.keys.Wanted(): string(i), c.keys.Key(KeyTransition): stamp(wallclock.Now())}
	maps.Copy(ann, annotations)
	err := c.patch(ctx, node, labels, ann)
	if err != nil {
		return err
	}
	msg, reason := "intent "+string(i), ReasonIntent
	if why != "" {
		msg += ": " + why
	}
	if i == IntentReboot && why != "" {
		reason = ReasonDrained // the drain's Event and the intent's, in one
	}
	c.ev.emit(ctx, node, corev1.EventTypeNormal, reason, "%s", msg)
	return nil
}

// view is what the decisions read of n: its annotations, its hooks' state
// and whether this process drained it for its perform-update.
func (c *controller) view(n *corev1.Node) NodeView {
	n = c.recorded(n)
	v := c.keys.View(n, c.o.NodeName)
	c.hookState(&v, n)
	v.Drained = c.drainedFor(n, v)
	return v
}

// hookState reads the hooks' label and annotations of n into v.
func (c *controller) hookState(v *NodeView, n *corev1.Node) {
	// trust: uo.node.hook-labels
	v.BeforeHook, v.AfterHook = n.Labels[c.keys.Key(KeyBeforeReboot)] == "true", n.Labels[c.keys.Key(KeyAfterReboot)] == "true"
	v.BeforeDone, v.AfterDone = allTrue(n, c.o.BeforeRebootChecks), allTrue(n, c.o.AfterRebootChecks)
}

func allTrue(n *corev1.Node, keys []string) bool {
	for _, k := range keys {
		// trust: uo.node.hook-checks
		if n.Annotations[k] != "true" {
			return false
		}
	}
	return true
}

// hookCleared is the patch that removes a hook's label and resets its
// checks' annotations.
func (c *controller) hookCleared(label string, checks []string) (labels, annotations map[string]any) {
	annotations = map[string]any{}
	for _, k := range checks {
		annotations[k] = nil
	}
	return map[string]any{c.keys.Key(label): nil}, annotations
}

// finishedNow records a Node this turn finished, as written: the turn's
// starts count its slot free (freed) instead of waiting a turn for the
// cache to show the write.
func (c *controller) finishedNow(n *corev1.Node) {
	if n == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.justDone[n.Name] = n
}

// freed puts the Nodes this turn finished, as written, into its nodes and
// views, so that the turn's starts fill their slots.
func (c *controller) freed(nodes map[string]*corev1.Node, views []NodeView) {
	c.mu.Lock()
	done := c.justDone
	c.justDone = map[string]*corev1.Node{}
	c.mu.Unlock()
	for i := range views {
		n := done[views[i].Name]
		if n == nil {
			continue
		}
		nodes[n.Name], views[i] = n, c.view(n)
	}
}
