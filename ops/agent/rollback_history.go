package agent

import (
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/wallclock"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/upgrade/layout"
)

// rollbackRun is one rollback Job as the decision sees it.
type rollbackRun struct {
	Name         string
	Attempt      int
	Done, Failed bool
	Reason       string
	At           time.Time // when it finished
}

// rollbackHistory is what the rollback Jobs of one boot and staged version
// say: the Jobs are the record, so an agent restarted mid-backoff decides
// the same.
type rollbackHistory struct {
	running  bool          // a Job still runs: wait for it
	next     int           // the attempt of the next Job
	failures int           // failed attempts since the last that succeeded
	lastFail time.Time     // when the last of them failed
	failed   []rollbackRun // every failed Job, to report
}

// rollbackHistoryOf decides from the runs (pure).
func rollbackHistoryOf(runs []rollbackRun) rollbackHistory {
	sort.Slice(runs, func(i, j int) bool { return runs[i].Attempt < runs[j].Attempt })
	h := rollbackHistory{next: 1}
	for _, r := range runs {
		h.next = max(h.next, r.Attempt+1)
		switch {
		case !r.Done:
			h.running = true
		case r.Failed:
			h.failures++
			h.failed = append(h.failed, r)
			if r.At.After(h.lastFail) {
				h.lastFail = r.At
			}
		default: // succeeded: a later swap staged again starts a new count
			h.failures, h.lastFail = 0, time.Time{}
		}
	}
	return h
}

// wait is how long to wait before the next attempt: the retry backoff of
// the failures so far, counted from the last failure.
func (h rollbackHistory) wait(r plan.Retry, now time.Time) time.Duration {
	if h.failures == 0 {
		return 0
	}
	return max(0, h.lastFail.Add(r.Backoff(h.failures)).Sub(now))
}

// rollbackJobs picks this node's rollback Jobs of the swap to staged made
// on boot from jobs.
func rollbackJobs(jobs []nodeJob, staged, boot string) []rollbackRun {
	var runs []rollbackRun
	for _, nj := range jobs {
		j := nj.job
		if j.Annotations[protocol.AnnotationJobAction] != "rollback" || j.Annotations[protocol.AnnotationJobVersion] != staged || j.Annotations[AnnotationRollbackBoot] != boot {
			continue
		}
		r := rollbackRun{Name: j.Name}
		r.Attempt, _ = strconv.Atoi(j.Annotations[AnnotationRollbackAttempt])
		r.Done, r.Failed, r.Reason, r.At = protocol.JobOutcome(j)
		if !r.Done && nj.podSucceeded {
			r.Done = true
		}
		runs = append(runs, r)
	}
	return runs
}

// reportRollbackFailures records each failed rollback Job once per
// process: Event RollbackFailed and the metric.
func (a *Agent) reportRollbackFailures(ch *v1.UpdateChannel, h rollbackHistory) {
	for _, r := range h.failed {
		a.mu.Lock()
		seen := a.rollbackFailed[r.Name]
		if a.rollbackFailed == nil {
			a.rollbackFailed = map[string]bool{}
		}
		a.rollbackFailed[r.Name] = true
		a.mu.Unlock()
		if seen {
			continue
		}
		a.metrics.rbFailed.Inc()
		retry := h.wait(a.opts.Retry, wallclock.Now()).Round(time.Second)
		a.log.Warn("rollback job failed", "job", r.Name, "reason", r.Reason, "retry-in", retry)
		a.recorder.Eventf(a.eventTarget(ch), corev1.EventTypeWarning, "RollbackFailed",
			"node %s: rollback job %s failed (%s); the swap stays staged for the next boot; retrying in %s (attempt %d)",
			a.opts.NodeName, r.Name, r.Reason, retry, h.next)
	}
}

// rollbackJobName is unique per node, staged version, boot and attempt.
func rollbackJobName(node, staged, boot string, attempt int) string {
	return protocol.JobName(protocol.JobKindRollback, node, staged, protocol.ShortHash(boot)[:6], strconv.Itoa(attempt))
}

// previousVersions is what the system directory's `previous` links name.
func (a *Agent) previousVersions() Versions {
	l := layout.New(a.opts.SystemDir)
	var v Versions
	v.Rootfs, _ = l.Previous(layout.Rootfs)
	v.Kernel, _ = l.Previous(layout.Kernel)
	v.K3s, _ = l.Previous(layout.K3s)
	return v
}

func channelName(ch *v1.UpdateChannel) string {
	if ch == nil {
		return ""
	}
	return ch.Name
}
