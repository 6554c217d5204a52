package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/wallclock"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// refusedGrace is how long the agent outlives a failed reboot request
// before it reports it: a reboot under way ends the agent before that.
const refusedGrace = 3 * time.Second

// reboot asks the Rebooter to reboot after rebootDelay, and again when the
// reboot stalled (still this boot RebootStall after the request; Event
// RebootStalled). how says what was done before (the drain), for the
// Rebooting Event; "" records none (an agent restarted before its reboot
// happened: the Event was recorded with the Rebooting phase).
func (a *Agent) reboot(ctx context.Context, ch *v1.UpdateChannel, s plan.Settings, slot v1.Slot, how string) error {
	state := a.rebootState()
	a.mu.Lock()
	since := time.Since(a.rebootAt).Round(time.Second)
	a.rebooting, a.rebootAt, a.rebootFor = true, time.Now(), ch.UID
	a.mu.Unlock()
	delay := s.RebootDelay
	switch {
	case state == plan.RebootStalled:
		delay = 0
		a.metrics.stalls.Inc()
		a.log.Warn("the reboot did not happen; requesting it again", "requested", since, "method", a.opts.Rebooter.String())
		a.recorder.Eventf(ch, corev1.EventTypeWarning, "RebootStalled", "node %s still runs the same boot %s after its reboot was requested with %s; requesting it again",
			a.opts.NodeName, since, a.opts.Rebooter)
	case how != "":
		a.recorder.Eventf(ch, corev1.EventTypeNormal, "Rebooting", "node %s upgraded and %s; rebooting in %s", a.opts.NodeName, how, s.RebootDelay)
	}
	a.log.Info("rebooting", "channel", ch.Name, "delay", delay, "method", a.opts.Rebooter.String())
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(delay):
	}
	if ok, why := plan.MayReboot(s, wallclock.Now()); !ok { // the window closed during the delay
		a.setRebooting(false)
		return a.deferToWindow(ctx, ch, slot, why)
	}
	if err := a.opts.Rebooter.Reboot(ctx); err != nil {
		a.setRebooting(false)
		if errors.Is(err, errSlotGone) { // not refused: not asked (the slot guard); the caller idles
			return err
		}
		// A reboot under way stops this process, and may kill the reboot
		// command first: only a refusal this process outlives is news.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(refusedGrace):
		}
		a.metrics.stalls.Inc()
		a.recorder.Eventf(ch, corev1.EventTypeWarning, "RebootStalled", "node %s: the reboot was refused: %v; retrying", a.opts.NodeName, err)
		return fmt.Errorf("reboot node %s with %s: %w", a.opts.NodeName, a.opts.Rebooter, err)
	}
	a.mu.Lock()
	a.rebootAt = time.Now()
	a.mu.Unlock()
	a.queue.AddAfter(key{roleNode, ch.Name}, a.opts.RebootStall) // to see whether it happened
	a.escalateLater(ctx, ch, slot)
	return nil
}

// escalateLater arms, once per process, the forced reboot (Options.
// RebootEscalation: sync, then reboot(2)) of a reboot the init was asked
// for and did not carry out within RebootEscalateAfter. In between, a
// stalled reboot is asked for again every RebootStall (the init may have
// missed the signal). PID 1 stuck in its shutdown (a service whose stop
// never returns) has usually stopped k3s already: the API server cannot be
// reached and the slot cannot be confirmed, and the forced reboot goes on
// without it (the node was drained and its reboot confirmed when it was
// asked for; the host is going down either way). Only an answer of the
// API server that the slot is gone holds it back.
func (a *Agent) escalateLater(ctx context.Context, ch *v1.UpdateChannel, slot v1.Slot) {
	if a.opts.RebootEscalation == nil {
		return
	}
	boot, err := a.bootID()
	if err != nil {
		return
	}
	a.mu.Lock()
	armed := a.escalating
	a.escalating = true
	a.mu.Unlock()
	if armed {
		return
	}
	go func() {
		defer func() {
			a.mu.Lock()
			a.escalating = false
			a.mu.Unlock()
		}()
		select {
		case <-ctx.Done():
			return
		case <-time.After(a.opts.RebootEscalateAfter):
		}
		if now, err := a.bootID(); err != nil || now != boot {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, escalateConfirm)
		err := a.confirmSlot(cctx, ch, slot)
		cancel()
		if errors.Is(err, errSlotGone) {
			a.log.Warn("the reboot did not happen, and the slot is gone: not forcing it", "channel", ch.Name)
			return
		}
		a.log.Warn("the init did not reboot the node: forcing the reboot", "after", a.opts.RebootEscalateAfter, "with", a.opts.RebootEscalation.String(), "slot check", err)
		a.metrics.stalls.Inc()
		a.recorder.Eventf(ch, corev1.EventTypeWarning, "RebootForced", "node %s: still the same boot %s after its reboot was asked of %s; forcing it with %s",
			a.opts.NodeName, a.opts.RebootEscalateAfter, a.opts.Rebooter, a.opts.RebootEscalation)
		if err := a.opts.RebootEscalation.Reboot(ctx); err != nil {
			a.log.Error("the forced reboot failed", "err", err)
		}
	}()
}

// escalateConfirm bounds the slot check before a forced reboot: the API
// server may be gone with the shutdown under way.
const escalateConfirm = 10 * time.Second

// rebootState is what this process did about the reboot.
func (a *Agent) rebootState() plan.RebootState {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case !a.rebooting:
		return plan.RebootNone
	case time.Since(a.rebootAt) >= a.opts.RebootStall:
		return plan.RebootStalled
	}
	return plan.RebootRequested
}

func (a *Agent) setRebooting(v bool) {
	a.mu.Lock()
	a.rebooting = v
	a.mu.Unlock()
}

// noteRebootFrom remembers the boot ID this process wrote on its Node
// before it marked the slot Rebooting (its Node cache may not show it
// yet), and what the drain did, for the Rebooting Event.
func (a *Agent) noteRebootFrom(boot, drained string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.wroteRebootFrom, a.drained = boot, drained
}

// drainedHow is what this process's drain did ("" when it drained nothing:
// restarted after it), once: the Rebooting Event is recorded once.
func (a *Agent) drainedHow() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	how := a.drained
	a.drained = ""
	return how
}

// rebootFromOf is the boot ID the Node records as the one the reboot
// starts from, or the one this process wrote, which its cache may lag.
func (a *Agent) rebootFromOf(n *corev1.Node) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.wroteRebootFrom != "" {
		return a.wroteRebootFrom
	}
	if u := a.ownObject(); u != nil && (a.announced != "" || u.Status.Protocol >= protocol.NodeUpdateProtocol) {
		// trust: ops.agent.own-nodeupdate
		return u.Status.RebootFrom
	}
	// trust: ops.agent.own-reboot-from
	return n.Annotations[protocol.AnnotationRebootFrom]
}
