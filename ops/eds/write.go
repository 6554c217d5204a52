package eds

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
)

// The controller is the only writer of its objects' status, and computes it
// whole from its caches: it replaces the status with a JSON patch (no
// resourceVersion conflicts with its own earlier writes that the cache has
// not shown yet) and skips a write when the status is the one it last wrote.

// putEDSStatus replaces e's status with st unless e or the last write already holds it.
func (c *Controller) putEDSStatus(ctx context.Context, e *v1.ExtendedDaemonSet, st v1.ExtendedDaemonSetStatus) (bool, error) {
	key := "eds/" + string(e.UID)
	if equality.Semantic.DeepEqual(e.Status, st) || c.lastWrote(key, st) {
		return false, nil
	}
	patch, err := statusPatch(st)
	if err == nil {
		_, err = c.eds.ExtendedDaemonSets(e.Namespace).Patch(ctx, e.Name, types.JSONPatchType, patch, metav1.PatchOptions{}, "status")
	}
	if err != nil {
		return false, fmt.Errorf("update the status of ExtendedDaemonSet %s/%s: %w", e.Namespace, e.Name, err)
	}
	c.remember(key, st)
	return true, nil
}

// putERSStatus replaces s's status with st unless s or the last write already holds it.
func (c *Controller) putERSStatus(ctx context.Context, s *v1.ExtendedDaemonSetReplicaSet, st v1.ExtendedDaemonSetReplicaSetStatus) error {
	key := "ers/" + string(s.UID)
	if equality.Semantic.DeepEqual(s.Status, st) || c.lastWrote(key, st) {
		return nil
	}
	patch, err := statusPatch(st)
	if err == nil {
		_, err = c.eds.ExtendedDaemonSetReplicaSets(s.Namespace).Patch(ctx, s.Name, types.JSONPatchType, patch, metav1.PatchOptions{}, "status")
	}
	if err != nil {
		return fmt.Errorf("update the status of ERS %s: %w", s.Name, err)
	}
	c.remember(key, st)
	return nil
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
