package plan

import "slices"

// The node's side of staging ahead is a second, small machine beside the
// slot's: NextStage decides from what the agent sees of its system
// directory, its staging permit, its Jobs and what its Node reports.

// MaxStageAttempts is how many staging Jobs a node runs for one permit
// before it gives up (a node killed mid-stage stages again once); then the
// slot's own Job downloads the release.
const MaxStageAttempts = 2

// StageObserved is what a node's agent sees of its staging.
type StageObserved struct {
	Target  string   // the channel's target ("" none)
	Running string   // the rootfs this boot runs
	OnDisk  []string // releases staged in the system directory, not current or previous
	Permit  bool     // the node holds a staging permit for Target
	// Busy: a Job of this node that writes the system directory runs
	// (staging, pruning, the slot's upgrade, a rollback): one at a time.
	Busy bool
	// InSlot: the node's slot has its Job or is past it; the slot owns the
	// system directory until it ends.
	InSlot   bool
	Failures int // staging Jobs for Target that failed under this permit
	// Published and PublishedFailed are the node's prestaged and
	// prestage-failed annotations.
	Published, PublishedFailed string
}

// StageStep is what the node's agent does next about staging.
type StageStep string

// The staging steps.
const (
	StageWait    StageStep = "Wait"      // nothing until something changes
	StagePrune   StageStep = "Prune"     // remove staged releases no longer wanted (a Job)
	StagePublish StageStep = "Publish"   // report on the Node what is staged, or that staging failed
	StageRelease StageStep = "Release"   // give the permit back: done
	StageCreate  StageStep = "CreateJob" // start the staging Job
)

// NextStage decides the next staging step from o, and says why. A permit
// whose staging is over (reported on the Node, or the node runs the
// target) goes back at once, whatever else runs; Jobs that write the
// system directory wait for the slot's and for each other.
func NextStage(o StageObserved) (StageStep, string) {
	if o.Permit && (o.Published == o.Target || o.PublishedFailed == o.Target || o.Running == o.Target) {
		return StageRelease, "staging " + o.Target + " is over"
	}
	if o.InSlot {
		return StageWait, "the slot's upgrade owns the system directory"
	}
	if o.Busy {
		return StageWait, "a Job of this node writes the system directory"
	}
	if stale := StaleStages(o.OnDisk, o.Target); len(stale) > 0 {
		return StagePrune, "staged " + stale[0] + " is not the target"
	}
	if staged, failed := StageReport(o); staged != o.Published || failed != o.PublishedFailed {
		return StagePublish, "the Node reports another staging state"
	}
	if !o.Permit {
		return StageWait, "no staging permit"
	}
	return StageCreate, "the permit is held and " + o.Target + " is not staged"
}

// PublishEndsStaging reports whether the publish o calls for (StagePublish)
// ends staging: the step after it would give the permit back
// (StageRelease), so the agent gives it back in the same write.
func PublishEndsStaging(o StageObserved) bool {
	o.Published, o.PublishedFailed = StageReport(o)
	step, _ := NextStage(o)
	return step == StageRelease
}

// StageReport is what the Node reports: the target when it is staged and
// not running yet, and the target when staging gave up on it.
func StageReport(o StageObserved) (staged, failed string) {
	if o.Target == "" || o.Target == o.Running {
		return "", ""
	}
	if slices.Contains(o.OnDisk, o.Target) {
		return o.Target, ""
	}
	if o.Failures >= MaxStageAttempts {
		return "", o.Target
	}
	if o.PublishedFailed == o.Target {
		return "", o.Target
	}
	return "", ""
}

// StaleStages are the releases staged on disk that are not target.
func StaleStages(onDisk []string, target string) []string {
	var out []string
	for _, v := range onDisk {
		if v != target {
			out = append(out, v)
		}
	}
	return out
}
