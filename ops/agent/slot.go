package agent

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"slipway.dev/slipway/ops/agent/plan"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// The node agent's writes to its own slot in a channel's status.

// setPhase records this node's slot at phase (and its Job), with a JSON
// patch of its own entry (patchSlot) or, when the entry moved, a
// read-modify-write with optimistic concurrency.
func (a *Agent) setPhase(ctx context.Context, ch *v1.UpdateChannel, slot v1.Slot, phase, job string) (*v1.UpdateChannel, error) {
	written, err := a.patchSlot(ctx, ch, slot, func(p string) []map[string]any {
		return []map[string]any{{"op": "add", "path": p + "/phase", "value": phase}, {"op": "add", "path": p + "/job", "value": job}}
	})
	if written == nil && err == nil {
		written, err = a.updateStatus(ctx, ch.Name, func(c *v1.UpdateChannel) error {
			mine, err := a.mySlot(c, slot)
			if err != nil {
				return err
			}
			mine.Phase, mine.Job = phase, job
			return nil
		})
	}
	if err == nil {
		a.noteWrote(ch.UID, slot, phase, job)
	}
	return written, err
}

// patchSlot writes ops (built for the path of this node's entry in
// status.updating) with a JSON patch that first tests the entry is still
// this node's slot (same index, node, attempt and version). It carries no
// resourceVersion, so the other nodes' writes do not make it conflict. It
// returns nil and no error when the entry moved: the caller falls back to
// an optimistic read-modify-write.
func (a *Agent) patchSlot(ctx context.Context, ch *v1.UpdateChannel, slot v1.Slot, ops func(path string) []map[string]any) (*v1.UpdateChannel, error) {
	i := plan.FindSlot(ch.Status, a.opts.NodeName)
	if i < 0 || ch.Status.Updating[i].Attempt != slot.Attempt {
		return nil, nil
	}
	p := fmt.Sprintf("/status/updating/%d", i)
	patch := []map[string]any{
		{"op": "test", "path": p + "/node", "value": a.opts.NodeName},
		{"op": "test", "path": p + "/attempt", "value": slot.Attempt},
		{"op": "test", "path": p + "/version", "value": slot.Version},
	}
	if !slot.Since.IsZero() { // the same grant, not a later one of the same version and attempt
		patch = append(patch, map[string]any{"op": "test", "path": p + "/since", "value": slot.Since})
	}
	patch = append(patch, ops(p)...)
	data, err := json.Marshal(patch)
	if err != nil {
		return nil, err
	}
	written, err := a.ops.UpdateChannels(a.opts.Namespace).Patch(ctx, ch.Name, types.JSONPatchType, data, metav1.PatchOptions{}, "status")
	if err == nil || ctx.Err() != nil {
		return written, ctx.Err()
	}
	a.log.Debug("slot entry moved; writing with a full update", "err", err)
	return nil, nil
}

// noteWrote remembers the phase this agent wrote to its slot in the
// channel of UID uid (a recreated channel is another), which its channel
// informer may not show yet. plan.Newest believes it only for the same
// slot (plan.SameSlot), and forgetSlot drops it when the slot ends.
func (a *Agent) noteWrote(uid types.UID, slot v1.Slot, phase, job string) {
	slot.Phase, slot.Job = phase, job
	slot.Node = a.opts.NodeName
	a.mu.Lock()
	defer a.mu.Unlock()
	a.wrote[uid] = slot
}

func (a *Agent) lastWrote(uid types.UID) v1.Slot {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.wrote[uid]
}

// forgetSlot ends this process's memory of its slot in the channel of UID
// uid: what it wrote and what it did towards the reboot. A later slot,
// even for the same version and attempt, starts from what the API server
// says.
func (a *Agent) forgetSlot(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.wrote[uid]; !ok {
		return
	}
	delete(a.wrote, uid)
	a.rebooting, a.wroteRebootFrom, a.drained = false, "", ""
}

// freeSlot removes this node's slot after a success: a JSON patch of its
// own entry when it has no failure entry to drop too, else an optimistic update.
func (a *Agent) freeSlot(ctx context.Context, ch *v1.UpdateChannel, slot v1.Slot) error {
	if plan.FindFailure(ch.Status, a.opts.NodeName) < 0 {
		written, err := a.patchSlot(ctx, ch, slot, func(p string) []map[string]any {
			return []map[string]any{{"op": "remove", "path": p}}
		})
		if written != nil || err != nil {
			return err
		}
	}
	_, err := a.updateStatus(ctx, ch.Name, func(c *v1.UpdateChannel) error {
		if _, err := a.mySlot(c, slot); err != nil {
			return err
		}
		plan.Succeed(&c.Status, a.opts.NodeName)
		return nil
	})
	return err
}
