package monitor

import (
	"strings"
	"testing"
	"time"

	"slipway.dev/slipway/ops/swarm/appcheck"
)

func TestJobsRunningRule(t *testing.T) {
	now := time.Unix(1000, 0)
	jobs := []string{"a", "b", "c"}
	for _, tc := range []struct {
		name string
		due  time.Time
		apps appcheck.Sample
		want string
	}{
		{"not expected", time.Time{}, appcheck.Sample{}, ""},
		{"not due yet", now.Add(time.Second), appcheck.Sample{"w1": {"a"}}, ""},
		{"every job in some hands", now.Add(-time.Second), appcheck.Sample{"w1": {"a", "c"}, "w2": {"b"}}, ""},
		{"a job nowhere", now.Add(-time.Second), appcheck.Sample{"w1": {"a"}, "w2": {"c"}}, "b"},
		{"no application", now.Add(-time.Second), appcheck.Sample{}, "a,b,c"},
		{"apps not read", now.Add(-time.Second), nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, err := JobsRunning(State{Now: now, Jobs: jobs, JobsDue: tc.due, Apps: tc.apps}, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if len(fs) > 0 {
				got = fs[0].Key
			}
			if got != tc.want {
				t.Errorf("missing %q, want %q: %+v", got, tc.want, fs)
			}
		})
	}
}

// TestPlantedJobRunningNowhere: once the jobs are due, applications that
// run every job report nothing; one job dropped by every application is
// reported, naming it.
func TestPlantedJobRunningNowhere(t *testing.T) {
	latest := make(chan appcheck.Sample, 1)
	latest <- appcheck.Sample{"w1": {"j1"}, "w2": {"j2", "j3"}}
	w := newWorld(t, Config{Tick: 20 * time.Millisecond, Apps: func() appcheck.Sample {
		s := <-latest
		latest <- s
		return s
	}})
	w.m.ExpectJobs([]string{"j1", "j2", "j3"}, time.Now())
	time.Sleep(100 * time.Millisecond)
	w.quiet("every job running")
	<-latest
	latest <- appcheck.Sample{"w1": {"j1"}, "w2": {"j3"}}
	v := w.expect(InvJobsRunning)
	if !strings.Contains(v.Message, "run nowhere") || v.Key != "j2" {
		t.Errorf("finding %s: %s", v.Key, v.Message)
	}
}
