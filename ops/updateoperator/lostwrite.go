package updateoperator

import (
	"context"
	"errors"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/drain"
)

// A Node write that returns an error may still have been applied: the
// connection to the API server dropped after the request went out, and
// only the answer was lost. The controller writes its record (record.go)
// before each Node write and used to put the record back on any error:
// a cordon (with perform-update) that landed was then, in the record,
// never made. The controller failed the update it had just started
// (reset-state, 46 ms after the agent began perform-update) without
// lifting the cordon it did not know it held, and counted the node out of
// flight while the Node said in flight: one slot too many, and a node
// left cordoned for good. So an error that is not the API server's own
// refusal is judged by reading the Node back: the write is kept when the
// Node carries it. When it does not, the write may still be on its way
// (the read answered before the write committed), so a Node without it is
// no proof either: like a Node that cannot be read, the caller keeps the
// record that holds the slot (a write that takes or keeps a slot is kept,
// and the next turn writes the Node back to the record; an uncordon is
// undone, and the cordon is lifted again). Only the API server's refusal
// puts a slot-holding record back at once.

// WriteFate is what a Node write that returned an error did, as far as
// the controller can tell.
type WriteFate int

// The fates of a failed write.
const (
	// WriteRefused: the API server answered that it did not apply it.
	WriteRefused WriteFate = iota
	// WriteLanded: read back, the Node carries it; only the answer was lost.
	WriteLanded
	// WriteNotLanded: read back, the Node does not carry it (yet: the
	// write may still be on its way).
	WriteNotLanded
	// WriteUnknown: not answered, and the Node could not be read back.
	WriteUnknown
)

func (f WriteFate) String() string {
	switch f {
	case WriteRefused:
		return "refused"
	case WriteLanded:
		return "landed"
	case WriteNotLanded:
		return "not landed"
	}
	return "unknown"
}

// Refused reports whether err, a write's error, is the API server's
// answer that it did not apply the write: a status below 500 (a refusal
// by RBAC or admission, an invalid value, the Node gone), but a request
// timeout (408), a conflict (409) and too many requests (429): client-go
// sends a write again by itself after a 429 or a 5xx with Retry-After,
// and the answer to that second try (a conflict with the first, which
// landed; a 429) says nothing of the first. A 5xx (an etcd timeout, a
// 504) and an error with no answer (a dropped or reset connection) may
// have been applied.
func Refused(err error) bool {
	var s apierrors.APIStatus
	if err == nil || !errors.As(err, &s) {
		return false
	}
	switch code := s.Status().Code; code {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooManyRequests:
		return false
	default:
		return code >= 400 && code < 500
	}
}

// JudgeWrite is the fate of a write that returned werr: refused by the
// API server; else, by the Node read back (readErr: it could not be),
// landed or not.
func JudgeWrite(werr, readErr error, landed bool) WriteFate {
	switch {
	case Refused(werr):
		return WriteRefused
	case readErr != nil:
		return WriteUnknown
	case landed:
		return WriteLanded
	}
	return WriteNotLanded
}

// UndoRecord reports whether the controller's record of a write of fate
// is put back as it was: a write refused is undone, one that landed is
// kept; one not seen on the Node (it may land still) or unknown is kept
// when keepUnknown (the record then holds the slot the write took or
// kept), else undone.
func UndoRecord(fate WriteFate, keepUnknown bool) bool {
	switch fate {
	case WriteLanded:
		return false
	case WriteUnknown, WriteNotLanded:
		return !keepUnknown
	}
	return true
}

// Carries reports whether n carries labels and annotations as a merge
// patch writes them: each string value as is, a nil value absent.
func Carries(n *corev1.Node, labels, annotations map[string]any) bool {
	if n == nil {
		return false
	}
	match := func(have map[string]string, want map[string]any) bool {
		for k, v := range want {
			got, ok := have[k]
			switch v := v.(type) {
			case nil:
				if ok {
					return false
				}
			case string:
				if !ok || got != v {
					return false
				}
			default:
				return false
			}
		}
		return true
	}
	return match(n.Labels, labels) && match(n.Annotations, annotations)
}

// CarriesCordon reports whether n carries owner's cordon with also.
func CarriesCordon(n *corev1.Node, owner string, also map[string]string) bool {
	if n == nil || !n.Spec.Unschedulable || drain.CordonedBy(n.Annotations) != owner {
		return false
	}
	ann := make(map[string]any, len(also))
	for k, v := range also {
		ann[k] = v
	}
	return Carries(n, nil, ann)
}

// CarriesUncordon reports whether n no longer carries owner's cordon
// record and carries also (the uncordon's own write).
func CarriesUncordon(n *corev1.Node, owner string, also drain.Meta) bool {
	return n != nil && drain.CordonedBy(n.Annotations) != owner && Carries(n, also.Labels, also.Annotations)
}

// readBackTimeout bounds the read of a Node after a write whose answer
// was lost.
const readBackTimeout = 5 * time.Second

// afterFailedWrite judges a Node write to node that returned werr (by
// reading the Node back, unless the API server refused it), undoes the
// record when UndoRecord says so, and returns the Node read back when the
// write landed (the caller goes on as if answered), else werr.
func (c *controller) afterFailedWrite(ctx context.Context, node string, werr error, landed func(*corev1.Node) bool, undo func(), keepUnknown bool) (*corev1.Node, error) {
	var n *corev1.Node
	var readErr error
	if !Refused(werr) {
		// Read back even when the write failed for the controller's own
		// end (its context canceled, the request maybe sent): the record
		// outlives the process, in the ConfigMap the next leader loads.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readBackTimeout)
		defer cancel()
		n, readErr = c.kube.CoreV1().Nodes().Get(rctx, node, metav1.GetOptions{})
		c.m.reads.WithLabelValues("get").Inc()
	}
	fate := JudgeWrite(werr, readErr, readErr == nil && landed(n))
	if UndoRecord(fate, keepUnknown) {
		undo()
	}
	if fate != WriteLanded {
		if fate != WriteRefused {
			c.o.Log.Warn("a write's answer was lost", "node", node, "fate", fate.String(), "err", werr)
		}
		return nil, werr
	}
	c.o.Log.Info("a write's answer was lost, but the Node carries it: taken as written", "node", node, "err", werr)
	c.wrote(node, n.ResourceVersion)
	return n, nil
}
