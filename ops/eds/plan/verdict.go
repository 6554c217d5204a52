package plan

import "time"

// Reasons of verdicts not named by a container's own reason.
const (
	ReasonManuallyFailed          = "ManuallyFailed"
	ReasonManuallyPaused          = "ManuallyPaused"
	ReasonRestartsTimeoutExceeded = "RestartsTimeoutExceeded"
	ReasonTimeoutExceeded         = "TimeoutExceeded"
	ReasonNoEligibleNode          = "NoEligibleNode"
	// ReasonSlowStartTimeoutExceeded: a canary container stayed in
	// ContainerCreating longer than maxSlowStartDuration (DataDog's reason).
	ReasonSlowStartTimeoutExceeded = "SlowStartTimeoutExceeded"
	ReasonValidated                = "Validated"
	ReasonManuallyValidated        = "ManuallyValidated"
	// ReasonAnalysisFailed: a query of the canary's analysis failed.
	ReasonAnalysisFailed = "AnalysisFailed"
)

// CanaryVerdict decides a canary's next step. Manual decisions come first
// (fail, then validate); then auto-fail (restarts above its maximum,
// restarts spread over more than maxRestartsDuration, from the first seen
// to the latest: one early restart does not fail a canary healthy since, older than canaryTimeout,
// in auto mode no node the canary's template admits while the
// ExtendedDaemonSet has nodes); then a manual pause, then auto-pause (restarts above its maximum, a
// container unable to start, or still being created, for longer than
// maxSlowStartDuration) unless
// manually unpaused; last, in auto mode, validation once duration has passed
// since the start and noRestartsDuration since the last restart, with every
// canary pod Ready. Restarts count over the canary's whole history (Past
// included); readiness only on the current canary nodes.
func CanaryVerdict(p CanaryPolicy, s CanaryState) Verdict {
	restarts, reason, last, cannot := summarize(append(append([]Health(nil), s.Pods...), s.Past...))
	age := s.Now.Sub(s.Start)
	switch {
	case s.ManuallyFailed:
		return Verdict{Action: Fail, Reason: ReasonManuallyFailed}
	case s.Validated:
		return Verdict{Action: Validate, Reason: ReasonManuallyValidated}
	case p.AutoFail && restarts > p.FailMaxRestarts:
		return Verdict{Action: Fail, Reason: reason}
	case p.AutoFail && p.MaxRestartsDuration > 0 && restarts > 0 && !s.RestartingSince.IsZero() &&
		last.Sub(s.RestartingSince) > p.MaxRestartsDuration: // restarts went on that long (a window, as DataDog's)
		return Verdict{Action: Fail, Reason: ReasonRestartsTimeoutExceeded}
	case p.AutoFail && p.CanaryTimeout > 0 && age > p.CanaryTimeout:
		return Verdict{Action: Fail, Reason: ReasonTimeoutExceeded}
	case p.AutoFail && !p.Manual && s.NoEligibleNode: // manual: a person decides, within canaryTimeout
		return Verdict{Action: Fail, Reason: ReasonNoEligibleNode}
	case s.ManuallyPaused:
		r := s.PausedReason
		if r == "" {
			r = ReasonManuallyPaused
		}
		return Verdict{Action: Pause, Reason: r, RecheckAfter: failDeadline(p, s)}
	case p.AutoPause && !s.ManuallyUnpaused && restarts > p.PauseMaxRestarts:
		return Verdict{Action: Pause, Reason: reason, RecheckAfter: failDeadline(p, s)}
	case p.AutoPause && !s.ManuallyUnpaused && cannot != "" && !s.CannotStartSince.IsZero() &&
		s.Now.Sub(s.CannotStartSince) >= p.MaxSlowStartDuration:
		return Verdict{Action: Pause, Reason: cannot, RecheckAfter: failDeadline(p, s)}
	case slowStart(p, s) && s.Now.Sub(s.CreatingSince) >= p.MaxSlowStartDuration:
		return Verdict{Action: Pause, Reason: ReasonSlowStartTimeoutExceeded, RecheckAfter: failDeadline(p, s)}
	}
	recheck := failDeadline(p, s)
	if cannot != "" && p.AutoPause && !s.ManuallyUnpaused && !s.CannotStartSince.IsZero() {
		recheck = earliest(recheck, s.CannotStartSince.Add(p.MaxSlowStartDuration).Sub(s.Now))
	}
	if slowStart(p, s) {
		recheck = earliest(recheck, s.CreatingSince.Add(p.MaxSlowStartDuration).Sub(s.Now))
	}
	if p.Manual {
		return Verdict{Action: Continue, RecheckAfter: recheck}
	}
	end := validationDue(p, s.Start, last)
	if !s.Now.Before(end) && allReady(s.Pods, s.Expected) {
		return Verdict{Action: Validate, Reason: ReasonValidated}
	}
	if wait := end.Sub(s.Now); wait > 0 {
		recheck = earliest(recheck, wait)
	}
	return Verdict{Action: Continue, RecheckAfter: recheck}
}

// ValidationDue is when an auto-mode canary can be validated by time:
// duration after its start, and noRestartsDuration after its last
// restart. An analysis must pass in an evaluation made at or after it.
func ValidationDue(p CanaryPolicy, s CanaryState) time.Time {
	_, _, last, _ := summarize(append(append([]Health(nil), s.Pods...), s.Past...))
	return validationDue(p, s.Start, last)
}

func validationDue(p CanaryPolicy, start, lastRestart time.Time) time.Time {
	end := start.Add(p.Duration)
	if q := lastRestart.Add(p.NoRestartsDuration); !lastRestart.IsZero() && q.After(end) {
		end = q
	}
	return end
}

// slowStart says whether a canary pod in ContainerCreating is bounded by
// maxSlowStartDuration: only when that is set (as DataDog's: every pod
// passes through ContainerCreating), with auto-pause on and not unpaused.
func slowStart(p CanaryPolicy, s CanaryState) bool {
	return p.AutoPause && !s.ManuallyUnpaused && p.MaxSlowStartDuration > 0 && !s.CreatingSince.IsZero()
}

// summarize is the highest restart count and its reason, the latest
// restart, and the first cannot-start reason among pods.
func summarize(pods []Health) (restarts int32, reason string, last time.Time, cannot string) {
	for _, h := range pods {
		if h.Restarts > restarts {
			restarts, reason = h.Restarts, h.RestartReason
		}
		if h.LastRestart.After(last) {
			last = h.LastRestart
		}
		if cannot == "" {
			cannot = h.CannotStart
		}
	}
	if reason == "" && restarts > 0 {
		reason = "Restarting"
	}
	return restarts, reason, last, cannot
}

// allReady says whether every expected canary pod is there and Ready; a
// canary of no node (replicas 0: a timed hold) has nothing to wait for.
func allReady(pods []Health, expected int) bool {
	if len(pods) < expected {
		return false
	}
	for _, h := range pods {
		if !h.Ready {
			return false
		}
	}
	return true
}

// failDeadline is how long until a time-based auto-fail can trigger (0:
// none pending). maxRestartsDuration is not one: only a new restart,
// which updates a pod, can trigger it.
func failDeadline(p CanaryPolicy, s CanaryState) time.Duration {
	if !p.AutoFail {
		return 0
	}
	var d time.Duration
	if p.CanaryTimeout > 0 {
		d = earliest(d, s.Start.Add(p.CanaryTimeout).Sub(s.Now)+time.Millisecond)
	}
	return d
}

// earliest is the smaller positive duration of a and b (0 means none).
func earliest(a, b time.Duration) time.Duration {
	switch {
	case b <= 0:
		return a
	case a <= 0 || b < a:
		return b
	}
	return a
}
