package appcheck

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"slipway.dev/slipway/ops/swarm/jobsfile"
)

// StandIn is an application stand-in: it follows a worker's jobs file as
// an application of the jobsfile protocol does and reports, in Report, what
// it runs at every instant (the jobs it started and has not finished
// stopping). Past the file's swarm-valid-until it stops every job.
type StandIn struct {
	// Jobs is the worker's jobs file (its --out).
	Jobs string
	// Ack, when set, is the acknowledgement file (the worker's --ack).
	Ack string
	// Report is where it writes what it runs, one job per line, replaced
	// atomically.
	Report string
	// StopDelay is how long stopping jobs takes (the jobs run meanwhile).
	StopDelay time.Duration
	// Poll is how often the jobs file is read (default 50 ms).
	Poll time.Duration
	// IgnoreDeadline runs the jobs past the file's swarm-valid-until (an
	// application that does not check it).
	IgnoreDeadline bool
}

// Run follows the jobs file until ctx ends, then stops every job (taking
// StopDelay), reports nothing running and acknowledges 0.
func (s StandIn) Run(ctx context.Context) error {
	if s.Jobs == "" || s.Report == "" {
		return fmt.Errorf("app stand-in: the jobs file and the report file are required")
	}
	if s.Poll <= 0 {
		s.Poll = 50 * time.Millisecond
	}
	var running []string
	if err := s.report(running); err != nil {
		return err
	}
	for ctx.Err() == nil {
		f, err := jobsfile.Read(s.Jobs)
		if err == nil {
			if !s.IgnoreDeadline && !f.Valid(time.Now()) {
				f.Jobs = nil // the worker did not renew in time: stop everything
			}
			// Stop what the file dropped, acknowledge it, start what it adds.
			var kept []string
			for _, j := range running {
				if slices.Contains(f.Jobs, j) {
					kept = append(kept, j)
				}
			}
			if len(kept) < len(running) {
				time.Sleep(s.StopDelay) // still running them meanwhile
				running = kept
				if err := s.report(running); err != nil {
					return err
				}
			}
			if s.Ack != "" {
				if n, ok := jobsfile.ReadAck(s.Ack); !ok || n != f.Version {
					if err := jobsfile.WriteAck(s.Ack, f.Version); err != nil {
						return err
					}
				}
			}
			if added := missing(f.Jobs, running); len(added) > 0 {
				running = append(running, added...)
				if err := s.report(running); err != nil {
					return err
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(s.Poll):
		}
	}
	if len(running) > 0 {
		time.Sleep(s.StopDelay)
	}
	if err := s.report(nil); err != nil {
		return err
	}
	if s.Ack != "" {
		return jobsfile.WriteAck(s.Ack, 0)
	}
	return nil
}

// missing is the jobs of want not in have.
func missing(want, have []string) []string {
	var out []string
	for _, j := range want {
		if !slices.Contains(have, j) {
			out = append(out, j)
		}
	}
	return out
}

func (s StandIn) report(running []string) error {
	text := strings.Join(running, "\n")
	if text != "" {
		text += "\n"
	}
	return jobsfile.Write(s.Report, text)
}
