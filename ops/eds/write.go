package eds

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
)

// The controller is the only writer of its objects' status, and computes it
// whole from its caches: it replaces the status with a JSON patch (no
// resourceVersion conflicts with its own earlier writes that the cache has
// not shown yet) and skips a write when the status is the one it last wrote.

// statusEvery is the least time between two status writes of one object
// that only change pod counts: a 100-node rollout moves the counts a few
// hundred times, and readers need them about once a second. State,
// condition and ERS changes are written at once.
const statusEvery = time.Second

// putEDSStatus replaces e's status with st unless e or the last write
// already holds it, or only its counts changed within statusEvery (then
// it returns how long to wait before the sync that writes them).
func (c *Controller) putEDSStatus(ctx context.Context, e *v1.ExtendedDaemonSet, st v1.ExtendedDaemonSetStatus) (bool, time.Duration, error) {
	key := "eds/" + string(e.UID)
	if equality.Semantic.DeepEqual(e.Status, st) || c.lastWrote(key, st) {
		return false, 0, nil
	}
	if wait := c.countsOnlyWait(key, edsCountsOnly(c.lastStatus(key, e.Status), st)); wait > 0 {
		return false, wait, nil
	}
	patch, err := statusPatch(st)
	if err == nil {
		err = c.patchStatus(ctx, "extendeddaemonsets", e.Namespace, e.Name, patch)
	}
	if err != nil {
		return false, 0, fmt.Errorf("update the status of ExtendedDaemonSet %s/%s: %w", e.Namespace, e.Name, err)
	}
	c.remember(key, st)
	return true, 0, nil
}

// putERSStatus is putEDSStatus for an ERS.
func (c *Controller) putERSStatus(ctx context.Context, s *v1.ExtendedDaemonSetReplicaSet, st v1.ExtendedDaemonSetReplicaSetStatus) (time.Duration, error) {
	key := "ers/" + string(s.UID)
	if equality.Semantic.DeepEqual(s.Status, st) || c.lastWrote(key, st) {
		return 0, nil
	}
	prev := s.Status
	if last, ok := c.lastStatus(key, s.Status).(v1.ExtendedDaemonSetReplicaSetStatus); ok {
		prev = last
	}
	a, b := prev, st
	a.Desired, a.Current, a.Ready, a.Available, a.IgnoredUnresponsiveNodes = 0, 0, 0, 0, 0
	b.Desired, b.Current, b.Ready, b.Available, b.IgnoredUnresponsiveNodes = 0, 0, 0, 0, 0
	if wait := c.countsOnlyWait(key, equality.Semantic.DeepEqual(a, b)); wait > 0 {
		return wait, nil
	}
	patch, err := statusPatch(st)
	if err == nil {
		err = c.patchStatus(ctx, "extendeddaemonsetreplicasets", s.Namespace, s.Name, patch)
	}
	if err != nil {
		return 0, fmt.Errorf("update the status of ERS %s: %w", s.Name, err)
	}
	c.remember(key, st)
	return 0, nil
}

// patchStatus applies a JSON patch to the status of an object of the group
// without decoding the answer: an object the controller cannot decode
// (decode.go) still gets its condition.
func (c *Controller) patchStatus(ctx context.Context, resource, ns, name string, patch []byte) error {
	return c.eds.RESTClient().Patch(types.JSONPatchType).Namespace(ns).Resource(resource).Name(name).
		SubResource("status").Body(patch).Do(ctx).Error()
}

// edsCountsOnly says whether two statuses differ in their counts only.
func edsCountsOnly(prev any, next v1.ExtendedDaemonSetStatus) bool {
	p, ok := prev.(v1.ExtendedDaemonSetStatus)
	if !ok {
		return false
	}
	for _, s := range []*v1.ExtendedDaemonSetStatus{&p, &next} {
		s.Desired, s.Current, s.Ready, s.Available, s.UpToDate, s.IgnoredUnresponsiveNodes = 0, 0, 0, 0, 0, 0
	}
	return equality.Semantic.DeepEqual(p, next)
}

// lastStatus is the status last written under key, else cached.
func (c *Controller) lastStatus(key string, cached any) any {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.written[key]; ok {
		return st
	}
	return cached
}

// countsOnlyWait is how long a counts-only write under key must wait (0: write now).
func (c *Controller) countsOnlyWait(key string, countsOnly bool) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !countsOnly {
		return 0
	}
	if wait := statusEvery - time.Since(c.writtenAt[key]); wait > 0 {
		return wait
	}
	return 0
}

// statusPatch is a JSON patch replacing the whole status with st.
func statusPatch(st any) ([]byte, error) {
	// "add" replaces an existing member, and also works on an object created without status.
	return json.Marshal([]map[string]any{{"op": "add", "path": "/status", "value": st}})
}

func (c *Controller) lastWrote(key string, st any) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev, ok := c.written[key]
	return ok && equality.Semantic.DeepEqual(prev, st)
}

func (c *Controller) remember(key string, st any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.written[key] = st
	c.writtenAt[key] = time.Now()
}

// freshEDS is e with the status this controller last wrote for it, when
// the cache may not show that yet.
func (c *Controller) freshEDS(e *v1.ExtendedDaemonSet) *v1.ExtendedDaemonSet {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.written["eds/"+string(e.UID)].(v1.ExtendedDaemonSetStatus); ok {
		e = e.DeepCopy()
		e.Status = *st.DeepCopy()
	}
	return e
}

// freshERS is s with the status this controller last wrote for it.
func (c *Controller) freshERS(s *v1.ExtendedDaemonSetReplicaSet) *v1.ExtendedDaemonSetReplicaSet {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.written["ers/"+string(s.UID)].(v1.ExtendedDaemonSetReplicaSetStatus); ok {
		s = s.DeepCopy()
		s.Status = *st.DeepCopy()
	}
	return s
}
