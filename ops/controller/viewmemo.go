package controller

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The memo of the view comparisons (views.go): every pass asks of every
// node it considers whether its view is due a write, and the answer rests
// on strings that change only when a write lands (a NodeUpdate's spec or
// status, a node's report). Encoding a NodeUpdate's views and parsing two
// views to tell an ended slot were half the controller's CPU in a rollout;
// the memo does each once per change, and lays a NodeUpdate's reports
// over its Node's metadata (withObjectReports) once per change of either.
// Each entry is kept with everything its answer is a function of (its
// key), so a stale entry is never used, only replaced.

// viewMemo holds the last answers, by node. It has its own lock: it is
// asked while ctl.mu is held (syncViews).
type viewMemo struct {
	mu sync.Mutex
	// objects are each node's NodeUpdate views and reports as annotations
	// (objectViews), of the object's resource version and the spec's.
	objects map[string]keyed[objectViewsKey, map[string]string]
	// ended are the last endedOnly answers, by node and channel, of the
	// view held, the view wanted and the node's reports.
	ended map[endedAt]keyed[endedKey, bool]
	// reports are each node's metadata with its NodeUpdate's reports and
	// versions laid over (withObjectReports), of both resource versions.
	reports map[string]keyed[reportsKey, *metav1.ObjectMeta]
}

// keyed is an answer and what it was made of.
type keyed[K comparable, V any] struct {
	key   K
	value V
}

// objectViewsKey: a NodeUpdate at resource version rv with its spec as
// written at specRV (the object's own, or the controller's last write
// laid over it).
type objectViewsKey struct{ rv, specRV string }

// endedAt is a node's view of one channel.
type endedAt struct {
	node string
	uid  types.UID
}

// endedKey: the view held, the view wanted and the node's reports annotation.
type endedKey struct{ cur, want, report string }

// reportsKey: a Node at resource version nodeRV, its NodeUpdate at updateRV.
type reportsKey struct{ nodeRV, updateRV string }

// remember returns the answer (*table)[at] holds when it was made of key,
// else build's, kept in its place. Two callers may build the same answer
// at once; either is kept.
func remember[A, K comparable, V any](mu *sync.Mutex, table *map[A]keyed[K, V], at A, key K, build func() V) V {
	mu.Lock()
	e, ok := (*table)[at]
	mu.Unlock()
	if ok && e.key == key {
		return e.value
	}
	v := build()
	mu.Lock()
	if *table == nil {
		*table = map[A]keyed[K, V]{}
	}
	(*table)[at] = keyed[K, V]{key: key, value: v}
	mu.Unlock()
	return v
}

// objectViews is node's NodeUpdate views as build makes them of the object
// at resource version rv and the spec at specRV. The map returned is
// shared: its readers do not change it.
func (m *viewMemo) objectViews(node, rv, specRV string, build func() map[string]string) map[string]string {
	return remember(&m.mu, &m.objects, node, objectViewsKey{rv: rv, specRV: specRV}, build)
}

// endedOnly is decide's answer for node's view of the channel of UID uid,
// of the view held cur, the view wanted want and the reports annotation
// report.
func (m *viewMemo) endedOnly(node string, uid types.UID, cur, want, report string, decide func() bool) bool {
	return remember(&m.mu, &m.ended, endedAt{node: node, uid: uid}, endedKey{cur: cur, want: want, report: report}, decide)
}

// withReports is node's metadata with its NodeUpdate's reports as build
// makes them of the Node at nodeRV and the NodeUpdate at updateRV. The
// metadata is shared: its readers do not change it.
func (m *viewMemo) withReports(node, nodeRV, updateRV string, build func() *metav1.ObjectMeta) *metav1.ObjectMeta {
	return remember(&m.mu, &m.reports, node, reportsKey{nodeRV: nodeRV, updateRV: updateRV}, build)
}

// forget drops node's entries (its Node is gone).
func (m *viewMemo) forget(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objects, node)
	delete(m.reports, node)
	for at := range m.ended {
		if at.node == node {
			delete(m.ended, at)
		}
	}
}

// forgetChannel drops the answers about the views of the channel of UID
// uid (it is deleted): kept, they would grow with every channel the
// cluster ever had.
func (m *viewMemo) forgetChannel(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for at := range m.ended {
		if at.uid == uid {
			delete(m.ended, at)
		}
	}
}
