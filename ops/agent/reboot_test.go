package agent

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/plan"
)

// refusesOnce is a reboot method whose first request does not reboot:
// silently (as logind does when it refuses) or with an error (a command
// that exits non-zero). Later requests reboot (simulated).
type refusesOnce struct {
	fleettest.SimReboot
	silent bool
	calls  atomic.Int32
}

func (r *refusesOnce) String() string { return "a reboot refused once" }

func (r *refusesOnce) Reboot(ctx context.Context) error {
	if r.calls.Add(1) == 1 {
		if r.silent {
			return nil
		}
		return errors.New("reboot command exited 1")
	}
	return r.SimReboot.Reboot(ctx)
}

// TestRefusedRebootIsRetried: a reboot that did not happen (same boot ID
// after --reboot-stall-timeout) or was refused is reported with a
// RebootStalled Event and requested again; the node then upgrades.
func TestRefusedRebootIsRetried(t *testing.T) {
	t.Parallel()
	for _, silent := range []bool{true, false} {
		name := map[bool]string{true: "silent", false: "error"}[silent]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var r *refusesOnce
			f := newFleet(t, 1, nil)
			f.opts = func(o *Options) {
				if r == nil {
					r = &refusesOnce{SimReboot: fleettest.SimReboot{F: f.Fleet, Node: o.NodeName}, silent: silent}
				}
				o.Rebooter, o.RebootStall = r, 2*time.Second
			}
			f.Start(f.NS + "-n0")
			f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(),
				NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS}}})
			f.WaitFor("the node upgraded", time.Minute, fleettest.Done(1))
			if n := f.EventsWithin("RebootStalled", 1, 5*time.Second); n != 1 {
				t.Errorf("%d RebootStalled events, want 1", n)
			}
			if got := r.calls.Load(); got != 2 {
				t.Errorf("%d reboot requests, want 2", got)
			}
			f.AssertAllAt("v2")
		})
	}
}

// stuckInit is an init that takes the reboot signal and never reboots:
// PID 1 stuck in its shutdown (a service whose stop never returns).
type stuckInit struct{}

func (stuckInit) Reboot(context.Context) error { return nil }
func (stuckInit) String() string               { return "a stuck init" }

// TestStuckShutdownIsForced: the init takes the reboot request and never
// reboots. The agent asks again every reboot stall timeout, and once the
// escalation bound has passed it forces the reboot (here the simulated
// one standing in for sync + reboot(2)), with a RebootForced Event; the
// node comes back on v2.
func TestStuckShutdownIsForced(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, func(o *Options) {
		o.RebootEscalation, o.Rebooter = o.Rebooter, stuckInit{}
		o.RebootStall, o.RebootEscalateAfter = 2*time.Second, 6*time.Second
	})
	node := f.NS + "-n0"
	f.Start(node)
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(), NodeSelector: f.Selector()})
	f.WaitFor("the node at v2", 2*time.Minute, fleettest.Done(1))
	if n := f.Events("RebootForced", 1); n < 1 {
		t.Error("no RebootForced Event")
	}
	if n := f.Events("RebootStalled", 1); n < 1 {
		t.Error("the stalled reboot was not asked again before it was forced (no RebootStalled Event)")
	}
}

// TestForgetSlotEndsItsReboot: a reboot requested by a process that wrote
// no phase to its slot (restarted once the slot was Rebooting) ends with
// the slot: the next slot does not start as "reboot requested".
func TestForgetSlotEndsItsReboot(t *testing.T) {
	a := &Agent{wrote: map[types.UID]v1.Slot{}, opts: Options{RebootStall: time.Hour}}
	a.mu.Lock()
	a.rebooting, a.rebootAt, a.rebootFor = true, time.Now(), "u1"
	a.mu.Unlock()
	a.forgetSlot("u2") // another channel's slot: the reboot stays
	if a.rebootState() != plan.RebootRequested {
		t.Fatal("forgetting another channel's slot ended this one's reboot")
	}
	a.forgetSlot("u1")
	if got := a.rebootState(); got != plan.RebootNone {
		t.Errorf("after the slot ended, the reboot state is %v, want none", got)
	}
}
