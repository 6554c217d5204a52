package agent

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/upgrade/reboot"
)

// The slot guard: no reboot without a slot the API server confirms at that
// moment. The reboot waits rebootDelay; the slot can be taken away
// meanwhile (a stale slot recovered, a channel deleted or made invalid, a
// window deferral). The node's Rebooter GETs its Node (its channel views)
// before the reboot, and refuses (errSlotGone) once the slot is gone, as
// the controller's drain client does before each eviction.

// slotGuard holds the slot the node's reboot under way acts for.
type slotGuard struct {
	a    *Agent
	mu   sync.Mutex
	ch   *v1.UpdateChannel
	slot v1.Slot
}

// hold sets the slot the reboot needs (nil ch: none).
func (g *slotGuard) hold(ch *v1.UpdateChannel, slot v1.Slot) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ch, g.slot = ch, slot
}

// confirm asks the API server whether the slot held is still this node's.
func (g *slotGuard) confirm(ctx context.Context, what string) error {
	g.mu.Lock()
	ch, slot := g.ch, g.slot
	g.mu.Unlock()
	if ch == nil {
		return fmt.Errorf("%s: node %s holds no slot: %w", what, g.a.opts.NodeName, errSlotGone)
	}
	if err := g.a.confirmSlot(ctx, ch, slot); err != nil {
		return fmt.Errorf("%s for channel %s: %w", what, ch.Name, err)
	}
	return nil
}

// guardedRebooter confirms the slot right before it reboots.
type guardedRebooter struct {
	g    *slotGuard
	next reboot.Rebooter
}

func (r *guardedRebooter) Reboot(ctx context.Context) error {
	if err := r.g.confirm(ctx, "reboot"); err != nil {
		return fmt.Errorf("not rebooting: %w", err)
	}
	return r.next.Reboot(ctx)
}

func (r *guardedRebooter) String() string { return r.next.String() }

// jobRefused records, when the API server refused a Job or slot Pod
// (what: "job NAME", "pod NAME") this agent built, a Warning Event on
// the channel saying why and what to do: its admission policy (a
// channel's image, token Secret or mirror the manifest does not allow),
// or Pod Security (slipway's namespace without the privileged level: a
// slot's Pod is refused at once, where a Job's pod was refused to the Job
// controller, unseen). The sync is retried with backoff, as for any
// failed write.
func (a *Agent) jobRefused(ch *v1.UpdateChannel, what string, err error) {
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		return
	}
	if strings.Contains(err.Error(), "violates PodSecurity") {
		a.recorder.Eventf(ch, corev1.EventTypeWarning, "JobRefused",
			"node %s: Pod Security refused %s: slipway's namespace needs the privileged level "+
				"(kubectl label namespace %s pod-security.kubernetes.io/enforce=privileged; see docs/install.md): %v", a.opts.NodeName, what, a.opts.Namespace, err)
		return
	}
	a.recorder.Eventf(ch, corev1.EventTypeWarning, "JobRefused",
		"node %s: the API server refused %s (see docs/security.md: a channel's image, token Secret and mirror must be ones the manifest allows): %v", a.opts.NodeName, what, err)
}
