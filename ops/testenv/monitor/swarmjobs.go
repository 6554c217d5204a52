package monitor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
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

// JobsDue is what a runner tells a monitor process once the swarm's pool
// settled: from Due on, every job of Jobs must run (ExpectJobs). It is
// written as one JSON file (WriteJobsDue) that `slipway-sim monitor
// --jobs-due FILE` reads when it appears (ReadJobsDue).
type JobsDue struct {
	Jobs []string  `json:"jobs"`
	Due  time.Time `json:"due"`
}

// WriteJobsDue writes d to path whole (a temporary file renamed), so that
// a reader never sees half of it.
func WriteJobsDue(path string, d JobsDue) error {
	if len(d.Jobs) == 0 || d.Due.IsZero() {
		return fmt.Errorf("jobs-due %s: want the jobs and the time they are due", path)
	}
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write jobs-due: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write jobs-due: %w", err)
	}
	return nil
}

// ReadJobsDue reads the file at path; ok is false while it does not exist.
func ReadJobsDue(path string) (d JobsDue, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return d, false, nil
	}
	if err != nil {
		return d, false, fmt.Errorf("read jobs-due: %w", err)
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return d, false, fmt.Errorf("jobs-due %s: %w (want {\"jobs\":[...],\"due\":\"<RFC 3339 time>\"})", path, err)
	}
	if len(d.Jobs) == 0 || d.Due.IsZero() {
		return d, false, fmt.Errorf("jobs-due %s: want the jobs and the time they are due", path)
	}
	return d, true, nil
}

// ExpectJobsFrom watches the jobs-due file at path (polling every
// interval) until ctx ends: each time it appears or changes, ExpectJobs
// with what it says. A file that does not parse is an error of the monitor
// (Errors), once per content, and changes nothing.
func (m *Monitor) ExpectJobsFrom(ctx context.Context, path string, interval time.Duration) {
	var last JobsDue
	var lastErr string
	for {
		d, ok, err := ReadJobsDue(path)
		if err != nil && err.Error() != lastErr {
			lastErr = err.Error()
			m.mu.Lock()
			m.errs = append(m.errs, err)
			m.mu.Unlock()
		}
		if ok && (!d.Due.Equal(last.Due) || !slices.Equal(d.Jobs, last.Jobs)) {
			m.ExpectJobs(d.Jobs, d.Due)
			last = d
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}
