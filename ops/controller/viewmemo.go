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
// over its Node's metadata (withObjectReports) once per change of either. Each entry is keyed by everything
// its answer is a function of, so a stale entry is never used, only
// replaced.

// viewMemo holds the last answers, by node. It has its own lock: it is
// asked while ctl.mu is held (syncViews).
type viewMemo struct {
	mu sync.Mutex
	// objects are each node's NodeUpdate views and reports as annotations (objectViews), by node.
	objects map[string]objectViewsMemo
	// ended are the last endedOnly answers, by node and channel.
	ended map[endedKey]endedMemo
	// reports are each node's metadata with its NodeUpdate's reports and
	// versions laid over (withObjectReports), by node.
	reports map[string]reportsMemo
}

// reportsMemo is a node's metadata at resource version nodeRV with its
// NodeUpdate's reports at updateRV laid over.
type reportsMemo struct {
	nodeRV, updateRV string
	meta             *metav1.ObjectMeta
}

// objectViewsMemo is objectViews of a NodeUpdate at resource version rv
// with its spec as written at specRV (the object's own, or the
// controller's last write laid over it).
type objectViewsMemo struct {
	rv, specRV string
	views      map[string]string
}

type endedKey struct {
	node string
	uid  types.UID
}

// endedMemo is endedOnly's answer for the view held cur, the view wanted
// want and the node's reports annotation report.
type endedMemo struct {
	cur, want, report string
	ended             bool
}

// objectViews returns the memo of node's NodeUpdate views when it was
// made of the same object (resource version rv) and spec (specRV), else
// build's, remembered. The map returned is shared: its readers do not
// change it.
func (m *viewMemo) objectViews(node, rv, specRV string, build func() map[string]string) map[string]string {
	m.mu.Lock()
	e, ok := m.objects[node]
	m.mu.Unlock()
	if ok && e.rv == rv && e.specRV == specRV {
		return e.views
	}
	views := build()
	m.mu.Lock()
	if m.objects == nil {
		m.objects = map[string]objectViewsMemo{}
	}
	m.objects[node] = objectViewsMemo{rv: rv, specRV: specRV, views: views}
	m.mu.Unlock()
	return views
}

// endedOnly returns the memo's answer for node's view of the channel of
// UID uid when it was asked of the same strings, else decide's, remembered.
func (m *viewMemo) endedOnly(node string, uid types.UID, cur, want, report string, decide func() bool) bool {
	k := endedKey{node: node, uid: uid}
	m.mu.Lock()
	e, ok := m.ended[k]
	m.mu.Unlock()
	if ok && e.cur == cur && e.want == want && e.report == report {
		return e.ended
	}
	ended := decide()
	m.mu.Lock()
	if m.ended == nil {
		m.ended = map[endedKey]endedMemo{}
	}
	m.ended[k] = endedMemo{cur: cur, want: want, report: report, ended: ended}
	m.mu.Unlock()
	return ended
}

// withReports returns the memo of node's metadata with its NodeUpdate's
// reports when it was made of the same Node (nodeRV) and NodeUpdate
// (updateRV), else build's, remembered. The metadata is shared: its
// readers do not change it.
func (m *viewMemo) withReports(node, nodeRV, updateRV string, build func() *metav1.ObjectMeta) *metav1.ObjectMeta {
	m.mu.Lock()
	e, ok := m.reports[node]
	m.mu.Unlock()
	if ok && e.nodeRV == nodeRV && e.updateRV == updateRV {
		return e.meta
	}
	meta := build()
	m.mu.Lock()
	if m.reports == nil {
		m.reports = map[string]reportsMemo{}
	}
	m.reports[node] = reportsMemo{nodeRV: nodeRV, updateRV: updateRV, meta: meta}
	m.mu.Unlock()
	return meta
}

// forget drops node's entries (its NodeUpdate or its Node is gone).
func (m *viewMemo) forget(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objects, node)
	delete(m.reports, node)
	for k := range m.ended {
		if k.node == node {
			delete(m.ended, k)
		}
	}
}
