package chaos

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"slipway.dev/slipway/ops/testenv/monitor"
)

// TestJudgeProcessPairsOnce: a process finding is dropped only when it is
// the run's own finding seen by the other monitor (same invariant, key or
// message, within pairWindow), each of the run's own pairing once: a
// recurrence a minute later, and a second finding of the process with the
// same message, stand on their own.
func TestJudgeProcessPairsOnce(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 19, 0, 0, 0, time.UTC)
	conc := func(at time.Time) monitor.Violation {
		return monitor.Violation{At: at, Invariant: monitor.InvChannelConcurrency, Key: "slipway-system/default",
			Message: "channel slipway-system/default: 2 nodes unavailable, concurrency 1: node-1 (NotReady); node-2 (cordoned by slipway-agent)"}
	}
	cordon := func(at time.Time) monitor.Violation {
		return monitor.Violation{At: at, Invariant: monitor.InvCordonBudget, Key: "node-2@" + at.Format(time.RFC3339Nano),
			Message: "slipway cordoned node-2 of channel slipway-system/default while 1 of its other nodes were unavailable, concurrency 1: node-1 (NotReady)"}
	}
	for _, tc := range []struct {
		name      string
		own, proc []monitor.Violation
		want      int // the process's findings that stand
	}{
		{"the same violation, seen 80 ms apart", []monitor.Violation{conc(t0)}, []monitor.Violation{conc(t0.Add(80 * time.Millisecond))}, 0},
		{"a cordon, its key the instant each saw it", []monitor.Violation{cordon(t0)}, []monitor.Violation{cordon(t0.Add(-time.Millisecond))}, 0},
		{"a recurrence a minute later only the process saw", []monitor.Violation{conc(t0)}, []monitor.Violation{conc(t0), conc(t0.Add(time.Minute))}, 1},
		{"two cordons with one message, the run saw one", []monitor.Violation{cordon(t0)}, []monitor.Violation{cordon(t0), cordon(t0.Add(2 * time.Second))}, 1},
		{"nothing of the run's own", nil, []monitor.Violation{conc(t0)}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "monitor.jsonl")
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range tc.proc {
				if err := monitor.WriteJSON(f, v); err != nil {
					t.Fatal(err)
				}
			}
			f.Close()
			res := Result{Excused: tc.own}
			if err := judgeProcess(&res, path, func(monitor.Violation) bool { return false }); err != nil {
				t.Fatal(err)
			}
			if len(res.Violations) != tc.want {
				t.Fatalf("%d of the process's findings stand, want %d: %+v", len(res.Violations), tc.want, res.Violations)
			}
		})
	}
}
