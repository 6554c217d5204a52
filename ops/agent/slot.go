package agent

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/plan"
)

// The node agent's writes about its own slot: reports on its own Node
// (report.go), which the controller folds into the channel's status.

// setPhase reports this node's slot at phase (and its Job) on its Node.
func (a *Agent) setPhase(ctx context.Context, ch *v1.UpdateChannel, slot v1.Slot, phase, job string) (*v1.UpdateChannel, error) {
	if err := a.reportSlot(ctx, ch, slot, phase, job, "", ""); err != nil {
		return nil, err
	}
	a.noteWrote(ch.UID, slot, phase, job)
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
// says. A reboot requested for the slot is forgotten with it even when
// this process wrote no phase (restarted after the slot was Rebooting): a
// request carried into the next slot would make it wait for a reboot
// nobody asked for, then skip its reboot delay.
func (a *Agent) forgetSlot(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, wrote := a.wrote[uid]
	if !wrote && a.rebootFor != uid {
		return
	}
	delete(a.wrote, uid)
	a.rebooting, a.rebootFor, a.wroteRebootFrom, a.drained, a.swappedAt = false, "", "", "", time.Time{}
}

// errSlotGone: the slot this agent works on was freed or replaced meanwhile.
var errSlotGone = errors.New("the slot is no longer held")

// mySlot returns this agent's slot in ch and errSlotGone when it holds none
// or holds another slot than want (plan.SameSlot; want.Attempt 0 accepts any).
func (a *Agent) mySlot(ch *v1.UpdateChannel, want v1.Slot) (*v1.Slot, error) {
	for i := range ch.Status.Updating {
		s := &ch.Status.Updating[i]
		if s.Node == a.opts.NodeName && (want.Attempt == 0 || plan.SameSlot(*s, want)) {
			return s, nil
		}
	}
	return nil, errSlotGone
}
