package updateoperator

import (
	"context"

	corev1 "k8s.io/api/core/v1"
)

// A node's drain runs beside the host's perform-update: both can be undone
// (the uncordon; reset-state), neither stops a workload for good, and the
// reboot waits for both. perform-update is wanted in the very write that
// cordons the node (StepPerform), so the drain starts with the intent. The
// drain runs outside the turns, so a drain of minutes holds no other node
// back; the turns skip a node while it is drained. A drain that ended is
// remembered for the perform-update it was for (the node's transition-time
// then): when the host performed already, the drain's own goroutine wants
// the reboot; else the turn that sees the host performed does. Nothing of
// it is written: a controller restarted (or a new leader) drains again,
// which resumes the first drain's record and deadline and finds nothing
// left to evict.

// drainDone is a drain this process finished.
type drainDone struct {
	transition string // the node's transition-time of the perform-update it drained for
	summary    string // what the drain did, said in the reboot intent's Event
}

// startDrain records that node is being drained and returns the drain's
// context: stopDrain cancels it, and so does the controller's own end.
func (c *controller) startDrain(ctx context.Context, node string) context.Context {
	dctx, cancel := context.WithCancel(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.draining[node] = cancel
	return dctx
}

// endDrain records that node's drain is over (done, failed or stopped)
// and wakes a turn to take the next step.
func (c *controller) endDrain(node string) {
	c.mu.Lock()
	if cancel := c.draining[node]; cancel != nil {
		cancel()
	}
	delete(c.draining, node)
	c.mu.Unlock()
	c.trigger()
}

// noteDrained records what node's finished drain did, before its end: the
// drain's own goroutine decides from it first (rebootIfPerformed), then
// the turns do.
func (c *controller) noteDrained(node string, done drainDone) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drained[node] = done
}

// stopDrain cancels node's drain under way.
func (c *controller) stopDrain(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cancel := c.draining[node]; cancel != nil {
		c.o.Log.Info("stopping the drain: the update it was for failed", "node", node)
		cancel()
	}
}

func (c *controller) isDraining(node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.draining[node] != nil
}

// drainedFor reports whether this process finished the drain for n's
// current perform-update; a record of another (an earlier attempt, or an
// update that moved on) is dropped.
func (c *controller) drainedFor(n *corev1.Node, v NodeView) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.drained[n.Name]
	if !ok {
		return false
	}
	if v.Wanted != IntentPerform || d.transition != n.Annotations[c.keys.Key(KeyTransition)] {
		delete(c.drained, n.Name)
		return false
	}
	return true
}

// drainSummary is what node's finished drain did, in words.
func (c *controller) drainSummary(node string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.drained[node].summary
}

// forgetDrains drops the drain records of Nodes no longer in the cluster.
func (c *controller) forgetDrains(nodes map[string]*corev1.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for node := range c.drained {
		if nodes[node] == nil {
			delete(c.drained, node)
		}
	}
}
