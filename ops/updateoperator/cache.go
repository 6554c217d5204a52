package updateoperator

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The controller decides from its informer's cache of the Nodes, not from
// a LIST of every Node per turn (which cost a full read of the fleet on
// every node event). A cache may lag the controller's own last writes,
// and a decision on a Node as it was before its start, failure or finish
// would start too many nodes or count a failure twice: so every write of
// the controller records the resource version it produced, and a turn
// waits (briefly) until the cache holds at least that version of each
// Node written; a cache that does not catch up is passed over for one
// quorum LIST. The resource versions of one resource are compared as
// numbers, as etcd issues them; one that is not a number is never taken
// as caught up (the LIST then decides). The agent reads its own Node the
// same way: from its informer's cache once that holds the agent's own
// last write, else with a GET.

// cacheWait bounds how long a turn waits for the cache to hold the
// controller's own writes before it reads the Nodes with a LIST.
const cacheWait = 2 * time.Second

// wrote records that the controller's write to node produced resource
// version rv: no turn decides on an older version of it.
func (c *controller) wrote(node, rv string) {
	v, err := strconv.ParseInt(rv, 10, 64)
	if err != nil {
		v = -1 // not comparable: the next turn lists
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.written[node]; !ok || v < 0 || v > old {
		c.written[node] = v
	}
}

// CaughtUp reports whether a cache holding the resource versions have
// (node -> version; absent: not in the cache) holds each of want (node ->
// the version of the controller's write; negative: not comparable). It
// returns the nodes caught up, whose records may be dropped.
func CaughtUp(have map[string]string, want map[string]int64) (ok bool, done []string) {
	ok = true
	for node, w := range want {
		rv, in := have[node]
		if !in { // deleted since: nothing to wait for
			done = append(done, node)
			continue
		}
		v, err := strconv.ParseInt(rv, 10, 64)
		if w >= 0 && err == nil && v >= w {
			done = append(done, node)
			continue
		}
		ok = false
	}
	return ok, done
}

// readNodes returns the Nodes to decide on: the cache's once it holds the
// controller's own writes, else a quorum LIST.
func (c *controller) readNodes(ctx context.Context) ([]corev1.Node, error) {
	if c.store != nil {
		timeout := time.NewTimer(cacheWait)
		defer timeout.Stop()
	wait:
		for {
			nodes, ok := c.fromCache()
			if ok {
				c.m.reads.WithLabelValues("cache").Inc()
				return nodes, nil
			}
			select { // the informer's next event, not a poll
			case <-c.moved:
			case <-timeout.C:
				break wait
			case <-ctx.Done():
				break wait
			}
		}
	}
	list, err := c.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	c.m.reads.WithLabelValues("list").Inc()
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	c.mu.Lock()
	clear(c.written) // a quorum read holds every write made before it
	c.mu.Unlock()
	return list.Items, nil
}

// fromCache copies the cached Nodes, if the cache holds the controller's
// own writes.
func (c *controller) fromCache() ([]corev1.Node, bool) {
	objs := c.store.List()
	have := make(map[string]string, len(objs))
	nodes := make([]corev1.Node, 0, len(objs))
	for _, o := range objs {
		if n, ok := o.(*corev1.Node); ok {
			have[n.Name] = n.ResourceVersion
			nodes = append(nodes, *n.DeepCopy())
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ok, done := CaughtUp(have, c.written)
	for _, n := range done {
		delete(c.written, n)
	}
	return nodes, ok
}

// latest is n, or the informer's copy of it when that is newer: a write
// conditional on the copy's resource version (the cordon of a drain
// resumed after a restart) then conflicts only with a change made after
// the informer showed it, and a decision made on it (rebootIfPerformed)
// sees the agent's latest report.
func (c *controller) latest(n *corev1.Node) *corev1.Node {
	if c.store == nil {
		return n
	}
	o, ok, _ := c.store.GetByKey(n.Name)
	cached, isNode := o.(*corev1.Node)
	if !ok || !isNode {
		return n
	}
	have, err1 := strconv.ParseInt(n.ResourceVersion, 10, 64)
	newer, err2 := strconv.ParseInt(cached.ResourceVersion, 10, 64)
	if err1 != nil || err2 != nil || newer <= have {
		return n
	}
	return cached.DeepCopy()
}

// readNode returns the agent's Node: the informer's copy once it holds the
// agent's own last write (a copy older than it would carry an intent out
// twice; the write's own watch event is waited for, at most cacheWait),
// else a GET. The first turn of a process always GETs.
func (a *agent) readNode(ctx context.Context) (*corev1.Node, error) {
	if a.booted && a.store != nil {
		timeout := time.NewTimer(cacheWait)
		defer timeout.Stop()
	wait:
		for {
			if n := a.fromCache(); n != nil {
				a.m.reads.WithLabelValues("cache").Inc()
				return n, nil
			}
			select {
			case <-a.moved:
			case <-timeout.C:
				break wait
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	n, err := a.kube.CoreV1().Nodes().Get(ctx, a.o.NodeName, metav1.GetOptions{})
	a.m.reads.WithLabelValues("get").Inc()
	if err != nil {
		return nil, fmt.Errorf("read my node: %w", err)
	}
	return n, nil
}

// fromCache is a copy of the informer's Node if it holds the agent's own
// last write, else nil.
func (a *agent) fromCache() *corev1.Node {
	o, ok, _ := a.store.GetByKey(a.o.NodeName)
	if !ok {
		return nil
	}
	n, ok := o.(*corev1.Node)
	if !ok {
		return nil
	}
	if fresh, _ := CaughtUp(map[string]string{n.Name: n.ResourceVersion}, map[string]int64{n.Name: a.written}); !fresh {
		return nil
	}
	return n.DeepCopy()
}

// patch writes the agent's Node and records the resource version it left.
func (a *agent) patch(ctx context.Context, labels, annotations map[string]any) error {
	n, err := patchNodeRV(ctx, a.kube, a.o.NodeName, labels, annotations)
	if err == nil && n != nil {
		v, perr := strconv.ParseInt(n.ResourceVersion, 10, 64)
		if perr != nil {
			v = -1 // not comparable: every next turn GETs
		}
		a.written = v
	}
	return err
}
