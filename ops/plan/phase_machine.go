package plan

// A node's rollout is a phase machine. Next decides the node agent's next
// step from what it observes (its slot, its Job, its Node, its boot, the
// window); the agent carries the step out with one short function, then
// observes and decides again, until the step is to wait for a change.

// JobState is what the agent sees of its slot's upgrade Job.
type JobState int

// The states of the slot's upgrade Job.
const (
	JobNone      JobState = iota // not created (or not in the cache yet)
	JobForeign                   // a Job of that name made for another slot
	JobRunning                   // created, not finished
	JobSucceeded                 // its pod succeeded (the swap is staged)
	JobFailed                    // failed or timed out
)

// RebootState is what this agent process did about the reboot.
type RebootState int

// The states of the reboot request of this process.
const (
	RebootNone      RebootState = iota // not requested by this process
	RebootRequested                    // requested, the stall timeout not passed
	RebootStalled                      // requested, still the same boot after the stall timeout
)

// Observed is what a node's agent sees of its own rollout.
type Observed struct {
	Phase    string   // the slot's phase (the newer of the cache and the agent's own write)
	Target   string   // the slot's version
	Job      JobState // the slot's own upgrade Job
	Cordoned bool     // slipway's cordon is on the node
	Running  string   // the rootfs this boot runs ("" not known yet)
	// Behind names the components the channel moves that this boot runs
	// from another release than its rootfs ("" when none, or not known):
	// a node at the target's rootfs is not at the target while one is.
	Behind     string
	BootID     string // this boot
	RebootFrom string // the boot recorded before the reboot was requested
	Ready      bool   // the Node's Ready condition
	Reboot     RebootState
	// Staging: a staging or pruning Job of this node still runs; the
	// slot's Job waits for it (one Job writes the system directory at a time).
	Staging bool
	// DrainBlocked and RebootBlocked say why the window allows no drain
	// (MayStart) or no reboot (MayReboot) now; "" when it does.
	DrainBlocked, RebootBlocked string
	// DrainBeside: the slot's Job only activates (its release was staged
	// ahead) and the channel drains: the node asks for its drain as the Job
	// runs, and reboots once both are done. A Job that downloads runs
	// first (a drain asked then would hold the node cordoned through the
	// download), and so does any Job when the drain is off.
	DrainBeside bool
	// Swapped: the system directory's `current` names the target (what
	// the next boot starts); read only when the slot's Job is not there.
	Swapped bool
	// PublishDue: the Node does not show what the system directory stages
	// (its Job swapped after the drain was asked); read only then.
	PublishDue bool
}

// Step is what the node's agent does next.
type Step string

// The steps.
const (
	StepWait          Step = "Wait"           // nothing until something changes
	StepAlreadyThere  Step = "AlreadyThere"   // it runs the target: free the slot, no Job, no reboot
	StepCreateJob     Step = "CreateJob"      // create the upgrade Job, mark the slot Upgrading
	StepFailJob       Step = "FailJob"        // the upgrade Job failed: record it, free the slot
	StepFailForeign   Step = "FailForeignJob" // the Job's name is taken by another slot's Job
	StepFailJobGone   Step = "FailJobGone"    // the Job went before it swapped, after the drain was asked
	StepPublishSwap   Step = "PublishSwap"    // swapped while the drain goes on: publish what boots next, when slow
	StepDeferToWindow Step = "DeferToWindow"  // no room in the window: give the slot back, unfailed
	StepDrain         Step = "Drain"          // cordon and drain (or resume), then mark Rebooting
	StepReboot        Step = "Reboot"         // request the reboot (again, when it stalled)
	StepFailFellBack  Step = "FailFellBack"   // back on a new boot at another version
	StepFailBehind    Step = "FailBehind"     // back at the target's rootfs, a component it moves not
	StepWaitReady     Step = "WaitReady"      // new boot at the target, Node not Ready yet
	StepSucceed       Step = "Succeed"        // new boot at the target, Ready: uncordon, publish, free
)

// Next decides the next step from o, and says why.
func Next(o Observed) (Step, string) {
	switch o.Phase {
	case "", PhasePending, PhaseUpgrading:
		return nextUpgrading(o)
	case PhaseDraining:
		return nextDrain(o)
	case PhaseRebooting, PhaseWaitingReady:
		if o.BootID == o.RebootFrom {
			return nextReboot(o)
		}
		return nextAfterBoot(o)
	}
	return StepWait, "unknown phase " + o.Phase
}

func nextUpgrading(o Observed) (Step, string) {
	switch o.Job {
	case JobNone:
		if !o.Cordoned && o.Running != "" && o.Running == o.Target && o.Behind == "" {
			return StepAlreadyThere, "it runs " + o.Target + " already"
		}
		if o.Staging {
			return StepWait, "the release is being staged; the slot's Job follows"
		}
		return StepCreateJob, "no upgrade Job for this slot yet"
	case JobForeign:
		return StepFailForeign, "the Job's name belongs to another rollout"
	case JobRunning:
		if o.DrainBeside && o.DrainBlocked == "" {
			return StepDrain, "the Job only activates: the drain is asked beside it"
		}
		return StepWait, "the upgrade Job runs"
	case JobFailed:
		return StepFailJob, "the upgrade Job failed"
	}
	return nextDrain(o)
}

// jobBeforeReboot is what the slot's Job says once the drain was asked (it
// may have been asked beside the Job): a Job failed, foreign, or gone before
// it swapped ends the slot (the failure lifts slipway's cordon); ok false
// when the Job has succeeded or still runs.
func jobBeforeReboot(o Observed) (Step, string, bool) {
	switch o.Job {
	case JobForeign:
		return StepFailForeign, "the Job's name belongs to another rollout", true
	case JobFailed:
		return StepFailJob, "the upgrade Job failed", true
	case JobNone:
		if !o.Swapped {
			return StepFailJobGone, "the upgrade Job is gone and the next boot would not start " + o.Target, true
		}
	}
	return "", "", false
}

func nextDrain(o Observed) (Step, string) {
	if step, why, ok := jobBeforeReboot(o); ok {
		return step, why
	}
	if o.Running != "" && o.Running == o.Target && o.Job != JobRunning {
		// The node rebooted on its own after the swap (power loss, a
		// panic, an admin's reboot): this boot runs the target already. No
		// drain and no second reboot: wait for Ready, then succeed.
		step, why := nextAfterBoot(o)
		return step, why + " (rebooted on its own after the swap)"
	}
	if !o.Cordoned && o.DrainBlocked != "" { // a drain begun goes on: its start was allowed
		return StepDeferToWindow, o.DrainBlocked
	}
	if o.Phase == PhaseDraining && o.RebootFrom == o.BootID { // asked on this boot
		if o.Job == JobSucceeded && o.PublishDue {
			return StepPublishSwap, "the Job swapped while the controller drains"
		}
		return StepWait, "the drain was asked; the controller drains"
	}
	if o.Job == JobRunning {
		return StepDrain, "the Job only activates: the drain is asked beside it"
	}
	return StepDrain, "the swap is staged"
}

func nextReboot(o Observed) (Step, string) {
	if step, why, ok := jobBeforeReboot(o); ok {
		return step, why
	}
	switch {
	case o.Job == JobRunning:
		return StepWait, "drained; the upgrade Job still runs"
	case o.Reboot == RebootRequested:
		return StepWait, "the reboot was requested"
	case o.RebootBlocked != "":
		return StepDeferToWindow, o.RebootBlocked
	case o.Reboot == RebootStalled:
		return StepReboot, "the reboot did not happen: still the same boot"
	}
	return StepReboot, "drained; the reboot is due"
}

func nextAfterBoot(o Observed) (Step, string) {
	switch {
	case o.Running == "":
		return StepWait, "what this boot runs is not known yet"
	case o.Running != o.Target:
		return StepFailFellBack, "back at " + o.Running + ", not " + o.Target
	case o.Behind != "":
		return StepFailBehind, "back at " + o.Target + " but " + o.Behind
	case !o.Ready:
		return StepWaitReady, "back at " + o.Target + ", not Ready yet"
	}
	return StepSucceed, "back at " + o.Target + " and Ready"
}
