package monitor

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"slipway.dev/slipway/ops/swarm/appcheck"
)

// InvJobsRunning names the rule JobsRunning.
const InvJobsRunning = "swarm-every-job-running"

// JobsRunning: once the pool settled and the bound passed (State.JobsDue,
// set by ExpectJobs), every job of State.Jobs runs in some application's
// hands, from what the applications report (Config.Apps). Jobs running
// nowhere are one finding, keyed by the jobs missing.
func JobsRunning(s State, _ Limits) ([]Finding, error) {
	if s.JobsDue.IsZero() || s.Now.Before(s.JobsDue) || s.Apps == nil {
		return nil, nil
	}
	running := appcheck.Running(s.Apps)
	var missing []string
	for _, j := range s.Jobs {
		if _, ok := slices.BinarySearch(running, j); !ok {
			missing = append(missing, j)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	return []Finding{{Invariant: InvJobsRunning, Key: strings.Join(missing, ","),
		Message: fmt.Sprintf("%d of %d jobs run nowhere %s after they were due (the pool settled): %s",
			len(missing), len(s.Jobs), s.Now.Sub(s.JobsDue).Round(time.Millisecond), strings.Join(missing, ", "))}}, nil
}

// ExpectJobs says that from due on (the pool settled, plus the bound) the
// applications must run every job of jobs (JobsRunning).
func (m *Monitor) ExpectJobs(jobs []string, due time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.jobs, m.jobsDue = slices.Clone(jobs), due
}
