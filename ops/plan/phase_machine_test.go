package plan

import "testing"

func TestNext(t *testing.T) {
	// base: a slot at v2 on a node running v1, boot b1, Ready, window open.
	base := func(edit func(*Observed)) Observed {
		o := Observed{Phase: PhaseUpgrading, Target: "v2", Running: "v1", BootID: "b1", Ready: true}
		edit(&o)
		return o
	}
	// swapped: the slot's Job succeeded (it swapped): the drain's and the reboot's rows.
	swapped := func(edit func(*Observed)) Observed {
		return base(func(o *Observed) { o.Job = JobSucceeded; edit(o) })
	}
	closed := "outside the maintenance window"
	for _, c := range []struct {
		name string
		o    Observed
		want Step
	}{
		// Pending / Upgrading
		{"pending, no Job: create it", base(func(o *Observed) { o.Phase = PhasePending }), StepCreateJob},
		{"empty phase (older status), no Job: create it", base(func(o *Observed) { o.Phase = "" }), StepCreateJob},
		{"runs the target already: free, no reboot", base(func(o *Observed) { o.Running = "v2" }), StepAlreadyThere},
		{"runs the target's rootfs, its k3s behind: a Job, not AlreadyThere", base(func(o *Observed) { o.Running, o.Behind = "v2", "k3s v1 is release v1's" }), StepCreateJob},
		{"staged but not booted is not there: a Job", base(func(o *Observed) { o.Running = "v1" }), StepCreateJob},
		{"running not known yet: a Job (never a false AlreadyThere)", base(func(o *Observed) { o.Running = "" }), StepCreateJob},
		{"cordoned by slipway at the target: no shortcut", base(func(o *Observed) { o.Running, o.Cordoned = "v2", true }), StepCreateJob},
		{"staging still runs: the slot's Job waits for it", base(func(o *Observed) { o.Staging = true }), StepWait},
		{"staging runs but it runs the target already: free", base(func(o *Observed) { o.Staging, o.Running = true, "v2" }), StepAlreadyThere},
		{"Job of another rollout under the name", base(func(o *Observed) { o.Job = JobForeign }), StepFailForeign},
		{"Job running: wait", base(func(o *Observed) { o.Job = JobRunning }), StepWait},
		{"Job failed", base(func(o *Observed) { o.Job = JobFailed }), StepFailJob},
		{"Job succeeded: drain", base(func(o *Observed) { o.Job = JobSucceeded }), StepDrain},
		{"Job succeeded, window closing: give the slot back", base(func(o *Observed) { o.Job, o.DrainBlocked = JobSucceeded, closed }), StepDeferToWindow},
		// Draining
		{"draining: drain", swapped(func(o *Observed) { o.Phase = PhaseDraining }), StepDrain},
		{"draining resumed after a restart, window closed since: the drain goes on", swapped(func(o *Observed) {
			o.Phase, o.Cordoned, o.DrainBlocked = PhaseDraining, true, closed
		}), StepDrain},
		{"draining not begun, window closed", swapped(func(o *Observed) { o.Phase, o.DrainBlocked = PhaseDraining, closed }), StepDeferToWindow},
		// Rebooted on its own after the swap (power loss, panic, an admin): no drain, no second reboot
		{"Job succeeded, then a reboot of its own: at the target, Ready: succeed", swapped(func(o *Observed) { o.Running, o.BootID = "v2", "b2" }), StepSucceed},
		{"Job succeeded, then a reboot of its own: not Ready yet", swapped(func(o *Observed) { o.Running, o.BootID, o.Ready = "v2", "b2", false }), StepWaitReady},
		{"draining, then a reboot of its own: succeed", swapped(func(o *Observed) {
			o.Phase, o.RebootFrom, o.BootID, o.Running, o.Cordoned = PhaseDraining, "b1", "b2", "v2", true
		}), StepSucceed},
		{"draining, then a reboot of its own, window closed: still succeed", swapped(func(o *Observed) {
			o.Phase, o.RebootFrom, o.BootID, o.Running, o.DrainBlocked = PhaseDraining, "b1", "b2", "v2", closed
		}), StepSucceed},
		{"draining, a reboot of its own, but the Job failed: the failure", swapped(func(o *Observed) {
			o.Phase, o.BootID, o.Running, o.Job = PhaseDraining, "b2", "v2", JobFailed
		}), StepFailJob},
		// Rebooting, same boot
		{"rebooting, same boot, not requested by this process: reboot", swapped(func(o *Observed) { o.Phase, o.RebootFrom = PhaseRebooting, "b1" }), StepReboot},
		{"rebooting, requested: wait", swapped(func(o *Observed) { o.Phase, o.RebootFrom, o.Reboot = PhaseRebooting, "b1", RebootRequested }), StepWait},
		{"rebooting, stalled: reboot again", swapped(func(o *Observed) { o.Phase, o.RebootFrom, o.Reboot = PhaseRebooting, "b1", RebootStalled }), StepReboot},
		{"rebooting, window closed: give the slot back", swapped(func(o *Observed) { o.Phase, o.RebootFrom, o.RebootBlocked = PhaseRebooting, "b1", closed }), StepDeferToWindow},
		{"rebooting, requested, window closed: the request stands", swapped(func(o *Observed) {
			o.Phase, o.RebootFrom, o.Reboot, o.RebootBlocked = PhaseRebooting, "b1", RebootRequested, closed
		}), StepWait},
		// After the reboot
		{"new boot at the target, Ready: succeed", base(func(o *Observed) { o.Phase, o.RebootFrom, o.Running = PhaseRebooting, "b0", "v2" }), StepSucceed},
		{"new boot at the target, not Ready", base(func(o *Observed) { o.Phase, o.RebootFrom, o.Running, o.Ready = PhaseRebooting, "b0", "v2", false }), StepWaitReady},
		{"waiting ready, turns Ready", base(func(o *Observed) { o.Phase, o.RebootFrom, o.Running = PhaseWaitingReady, "b0", "v2" }), StepSucceed},
		{"new boot at the old version: fell back", base(func(o *Observed) { o.Phase, o.RebootFrom = PhaseRebooting, "b0" }), StepFailFellBack},
		{"new boot, running not known: wait", base(func(o *Observed) { o.Phase, o.RebootFrom, o.Running = PhaseRebooting, "b0", "" }), StepWait},
		{"new boot at the target's rootfs, its k3s behind: fail", base(func(o *Observed) {
			o.Phase, o.RebootFrom, o.Running, o.Behind = PhaseRebooting, "b0", "v2", "k3s v1.23.17+k3s1 is release v1's"
		}), StepFailBehind},
		// The drain beside an activation (the release staged ahead)
		{"activation runs: ask for the drain beside it", base(func(o *Observed) { o.Job, o.DrainBeside = JobRunning, true }), StepDrain},
		{"activation runs, window allows no drain: wait for the Job", base(func(o *Observed) {
			o.Job, o.DrainBeside, o.DrainBlocked = JobRunning, true, closed
		}), StepWait},
		{"a Job that downloads runs: no drain beside it", base(func(o *Observed) { o.Job, o.DrainBeside = JobRunning, false }), StepWait},
		{"drain asked, activation runs: wait", base(func(o *Observed) { o.Phase, o.RebootFrom, o.Job = PhaseDraining, "b1", JobRunning }), StepWait},
		{"drain asked, activation failed: fail (lifts the cordon)", base(func(o *Observed) {
			o.Phase, o.RebootFrom, o.Job, o.Cordoned = PhaseDraining, "b1", JobFailed, true
		}), StepFailJob},
		{"drain asked, activation's name taken: fail", base(func(o *Observed) { o.Phase, o.RebootFrom, o.Job = PhaseDraining, "b1", JobForeign }), StepFailForeign},
		{"drain asked, Job gone before it swapped: fail", base(func(o *Observed) { o.Phase, o.RebootFrom = PhaseDraining, "b1" }), StepFailJobGone},
		{"drain asked, Job gone after it swapped: wait for the drain", base(func(o *Observed) {
			o.Phase, o.RebootFrom, o.Swapped = PhaseDraining, "b1", true
		}), StepWait},
		{"drain asked, swapped, not published: publish", swapped(func(o *Observed) {
			o.Phase, o.RebootFrom, o.PublishDue = PhaseDraining, "b1", true
		}), StepPublishSwap},
		{"drain asked, swapped and published: wait for the drain", swapped(func(o *Observed) { o.Phase, o.RebootFrom = PhaseDraining, "b1" }), StepWait},
		{"drain asked on an earlier boot, activation runs: ask again", base(func(o *Observed) { o.Phase, o.RebootFrom, o.Job = PhaseDraining, "b0", JobRunning }), StepDrain},
		{"drained, activation runs: no reboot yet", base(func(o *Observed) { o.Phase, o.RebootFrom, o.Job = PhaseRebooting, "b1", JobRunning }), StepWait},
		{"drained, activation runs, an earlier reboot request stalled: still no reboot", base(func(o *Observed) {
			o.Phase, o.RebootFrom, o.Job, o.Reboot = PhaseRebooting, "b1", JobRunning, RebootStalled
		}), StepWait},
		{"drained, activation failed: fail, no reboot", base(func(o *Observed) {
			o.Phase, o.RebootFrom, o.Job, o.Cordoned = PhaseRebooting, "b1", JobFailed, true
		}), StepFailJob},
		{"drained, activation's name taken: fail, no reboot", base(func(o *Observed) { o.Phase, o.RebootFrom, o.Job = PhaseRebooting, "b1", JobForeign }), StepFailForeign},
		{"drained, Job gone before it swapped: fail, no reboot", base(func(o *Observed) { o.Phase, o.RebootFrom = PhaseRebooting, "b1" }), StepFailJobGone},
		{"drained, Job gone after it swapped: reboot", base(func(o *Observed) { o.Phase, o.RebootFrom, o.Swapped = PhaseRebooting, "b1", true }), StepReboot},
		{"drained, activation succeeded: reboot", swapped(func(o *Observed) { o.Phase, o.RebootFrom = PhaseRebooting, "b1" }), StepReboot},
		{"unknown phase: wait", base(func(o *Observed) { o.Phase = "Exploding" }), StepWait},
	} {
		got, why := Next(c.o)
		if got != c.want || why == "" {
			t.Errorf("%s: Next = %s (%q), want %s", c.name, got, why, c.want)
		}
	}
}
