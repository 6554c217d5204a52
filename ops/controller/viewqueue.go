package controller

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
)

// The view queue's order. A node holding a slot waits on its view for its
// next step (its Job, its reboot); a node that only gains or loses a
// staging permit, a new target or a view to remove does not hold up a
// rollout. When many views change at once (a wave of staging permits
// given back and granted, a new target for every node), the slot holders'
// views are written first, instead of behind a hundred others.

// slotHolderSet is the nodes holding a slot, by channel UID, as the last
// pass over each channel left them (setViews).
type slotHolderSet struct {
	mu    sync.Mutex
	nodes map[types.UID]map[string]bool
}

// set records the slot holders of the channel of UID uid.
func (s *slotHolderSet) set(uid types.UID, nodes []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nodes == nil {
		s.nodes = map[types.UID]map[string]bool{}
	}
	m := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		m[n] = true
	}
	s.nodes[uid] = m
}

// drop forgets a deleted channel's slot holders.
func (s *slotHolderSet) drop(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.nodes, uid)
}

// holds reports whether node holds a slot in any channel.
func (s *slotHolderSet) holds(node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.nodes {
		if m[node] {
			return true
		}
	}
	return false
}

// slotsFirst is a workqueue order (client-go's workqueue.Queue) that pops
// the nodes first for which first is true at the time they were added,
// each lane in the order added; a node added again once it became urgent
// moves up (Touch).
type slotsFirst struct {
	first        func(node string) bool
	urgent, rest []string
}

func (q *slotsFirst) Push(node string) {
	if q.first(node) {
		q.urgent = append(q.urgent, node)
		return
	}
	q.rest = append(q.rest, node)
}

func (q *slotsFirst) Touch(node string) {
	if !q.first(node) {
		return
	}
	if i := slices.Index(q.rest, node); i >= 0 {
		q.rest = slices.Delete(q.rest, i, i+1)
		q.urgent = append(q.urgent, node)
	}
}

func (q *slotsFirst) Len() int { return len(q.urgent) + len(q.rest) }

func (q *slotsFirst) Pop() string {
	lane := &q.rest
	if len(q.urgent) > 0 {
		lane = &q.urgent
	}
	node := (*lane)[0]
	(*lane)[0] = ""
	*lane = (*lane)[1:]
	return node
}

// newViewQueue is the controller's queue of nodes whose views to write,
// the nodes for which first is true popped first (slotsFirst), with
// client-go's rate-limited retries.
func newViewQueue(first func(node string) bool) workqueue.TypedRateLimitingInterface[string] {
	const name = "slipway-controller-views"
	ordered := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: name, Queue: &slotsFirst{first: first}})
	delaying := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: name, Queue: ordered})
	return workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: name, DelayingQueue: delaying})
}
