package eds

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/eds/plan"
)

// expectationTTL bounds how long a write not yet seen in the cache is assumed done.
const expectationTTL = 30 * time.Second

// podsOf lists e's pods from the cache, and the old DaemonSet's when it
// names one (annotation old-daemonset).
func (c *Controller) podsOf(ctx context.Context, e *v1.ExtendedDaemonSet) ([]*corev1.Pod, error) {
	objs, err := c.pods.ByIndex(indexByEDS, e.Namespace+"/"+e.Name)
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*corev1.Pod))
	}
	old, err := c.oldDaemonSetPods(ctx, e)
	return append(out, old...), err
}

// overridesHeld says whether pod p has node's resource overrides: its
// nodehash annotation is theirs, or, for a pod that has none (one handed
// over from DataDog's controller, which hashes differently), its
// containers' resources are what the overrides give (the controller may
// not write the annotation: it has no right to update pods).
func overridesHeld(p *corev1.Pod, o override) bool {
	// trust: eds.pod.node-hash
	h, ok := p.Annotations[v1.AnnotationNodeHash]
	if ok || len(o.containers) == 0 {
		return h == o.hash
	}
	for _, ct := range p.Spec.Containers {
		if want, set := o.containers[ct.Name]; set && !equality.Semantic.DeepEqual(ct.Resources, want) {
			return false
		}
	}
	return true
}

// nodeOf is the node a pod is bound or pinned to.
func nodeOf(p *corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, f := range t.MatchFields {
				if f.Key == "metadata.name" && len(f.Values) == 1 {
					return f.Values[0]
				}
			}
		}
	}
	return ""
}

// nodeStates sorts r's pods by node into the planner's view. The EDS's
// pods on nodes that exist but no longer admit the active template leave
// through the rolling budget (states with Leave); those on nodes gone are
// returned apart, to be deleted at once.
func (c *Controller) nodeStates(r *round, overrides map[string]override) ([]plan.NodeState, []*corev1.Pod) {
	key := r.e.Namespace + "/" + r.e.Name
	byNode := map[string][]*corev1.Pod{}
	leaving := map[string][]*corev1.Pod{}
	var stray []*corev1.Pod
	for _, p := range r.pods {
		n := nodeOf(p)
		if _, ok := r.targets[n]; ok {
			byNode[n] = append(byNode[n], p)
			continue
		}
		// The old DaemonSet's pods on nodes the EDS does not select are
		// the DaemonSet's: deleting them, it would recreate them.
		// trust: eds.pod.labels
		if p.Labels[v1.LabelName] != r.e.Name {
			continue
		}
		o, ok, _ := c.nodes.GetByKey(n)
		switch {
		// trust: eds.node.placement
		case ok && p.Labels[v1.LabelReplicaSet] == r.active.Name && plan.MayStay(o.(*corev1.Node), r.selector, &r.active.Spec.Template.Spec):
			// running on a node that only a NoSchedule taint closed: it stays
		case ok && o.(*corev1.Node).DeletionTimestamp == nil:
			leaving[n] = append(leaving[n], p)
		case p.DeletionTimestamp == nil:
			stray = append(stray, p)
		}
	}
	states := leavingStates(leaving, c.expected, key, r.now)
	for _, n := range r.nodes {
		s := plan.NodeState{Node: n.Name, Template: r.targets[n.Name]}
		for _, p := range byNode[n.Name] {
			// trust: eds.pod.status
			pp := plan.Pod{Name: p.Name, Available: plan.Available(p, 0, r.now) && p.Status.Phase == corev1.PodRunning,
				Terminating:  p.DeletionTimestamp != nil || c.expected(key, "delete/"+p.Name),
				Unresponsive: (p.Spec.NodeName == "" && r.now.Sub(p.CreationTimestamp.Time) > v1.UnresponsiveAfter) || stuckTerminating(p, r.now)}
			failed := p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
			if failed && !pp.Terminating {
				c.noteFailure(key, n.Name, p.UID)
			}
			if s.Current == nil && !failed && !pp.Terminating && p.Labels[v1.LabelReplicaSet] == r.targets[n.Name] &&
				overridesHeld(p, overrides[n.Name]) {
				s.Current = &pp
				continue
			}
			s.Old = append(s.Old, pp)
		}
		if s.Current != nil && s.Current.Available && healthyFor(byNode[n.Name], s.Current.Name, r.now) {
			c.clearFailures(key, n.Name) // a pod that has run a while ends the series of failures
		}
		if s.Current == nil && len(s.Old) == 0 && c.expected(key, "create/"+n.Name) {
			s.Current = &plan.Pod{Name: "(being created)"}
		}
		states = append(states, s)
	}
	return states, stray
}

// stuckTerminating says whether pod is still there past its deletion
// time plus its grace period (DataDog's rule): its kubelet, if any, is
// not answering.
func stuckTerminating(pod *corev1.Pod, now time.Time) bool {
	if pod.DeletionTimestamp == nil {
		return false
	}
	var grace time.Duration
	if pod.DeletionGracePeriodSeconds != nil {
		grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	}
	return pod.DeletionTimestamp.Add(grace).Before(now)
}

// leavingStates are the planner's view of the nodes the EDS leaves: their
// pods are old ones, none is created there.
func leavingStates(leaving map[string][]*corev1.Pod, expected func(key, what string) bool, key string, now time.Time) []plan.NodeState {
	nodes := make([]string, 0, len(leaving))
	for n := range leaving {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	states := make([]plan.NodeState, 0, len(nodes))
	for _, n := range nodes {
		s := plan.NodeState{Node: n, Leave: true}
		for _, p := range leaving[n] {
			s.Old = append(s.Old, plan.Pod{Name: p.Name, Available: plan.Available(p, 0, now) && p.Status.Phase == corev1.PodRunning,
				Terminating: p.DeletionTimestamp != nil || expected(key, "delete/"+p.Name)})
		}
		states = append(states, s)
	}
	return states
}

// expected says whether a write recorded by expect is still unseen and recent.
func (c *Controller) expected(key, what string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.pending[key][what]
	return ok && time.Since(at) < expectationTTL
}

func (c *Controller) expect(key, what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending[key] == nil {
		c.pending[key] = map[string]time.Time{}
	}
	c.pending[key][what] = time.Now()
}

// observe drops the expectations the cache now shows done.
func (c *Controller) observe(key string, pods []*corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.pending[key]
	for _, p := range pods {
		delete(m, "create/"+nodeOf(p))
		if p.DeletionTimestamp != nil {
			delete(m, "delete/"+p.Name)
		}
	}
}

func (c *Controller) forget(ns, name string) {
	c.mu.Lock()
	delete(c.pending, ns+"/"+name)
	for k := range c.failed {
		if strings.HasPrefix(k, ns+"/"+name+"/") {
			delete(c.failed, k)
		}
	}
	c.mu.Unlock()
	c.metrics.forget(ns, name)
}

// parallel runs fn over items, a few at a time, and returns the first error.
func parallel[T any](items []T, fn func(T) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	sem := make(chan struct{}, 16)
	for _, it := range items {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(it); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// deletePod deletes a pod of e (or of the old DaemonSet) and records it.
func (c *Controller) deletePod(ctx context.Context, key, ns, name string) error {
	err := c.kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s/%s: %w", ns, name, err)
	}
	c.expect(key, "delete/"+name)
	c.metrics.actions.WithLabelValues("delete").Inc()
	return nil
}

// failures counts, per ExtendedDaemonSet and node, the pods that failed
// there in a row (each pod once), and when the last one was seen.
type failures struct {
	count int
	last  time.Time
	seen  map[types.UID]bool
}

func (c *Controller) noteFailure(key, node string, uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := key + "/" + node
	f := c.failed[k]
	if f == nil {
		f = &failures{seen: map[types.UID]bool{}}
		c.failed[k] = f
	}
	if !f.seen[uid] {
		f.seen[uid] = true
		f.count++
		f.last = time.Now()
	}
}

func (c *Controller) clearFailures(key, node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.failed, key+"/"+node)
}

// failureBackoff is how long node must still wait before its next pod.
func (c *Controller) failureBackoff(key, node string) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.failed[key+"/"+node]
	if f == nil {
		return 0
	}
	return time.Until(f.last.Add(plan.FailedPodBackoff(f.count)))
}

// failureReset is how long a pod must have been available for its node's
// failure backoff to start over.
const failureReset = time.Minute

func healthyFor(pods []*corev1.Pod, name string, now time.Time) bool {
	for _, p := range pods {
		if p.Name == name {
			return plan.Available(p, failureReset, now)
		}
	}
	return false
}
