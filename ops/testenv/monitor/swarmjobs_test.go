package monitor

import (
	"os"
	"path/filepath"
	"slices"
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

// TestJobsDueFile: the runner's jobs-due file reads back as written; no
// file is not yet due; a file without jobs or a due time, or not JSON, is
// an error saying what it wants.
func TestJobsDueFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "jobs-due.json")
	if _, ok, err := ReadJobsDue(path); ok || err != nil {
		t.Fatalf("no file: ok %t err %v, want not due, no error", ok, err)
	}
	due := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := WriteJobsDue(path, JobsDue{Jobs: []string{"a", "b"}, Due: due}); err != nil {
		t.Fatal(err)
	}
	d, ok, err := ReadJobsDue(path)
	if !ok || err != nil || !d.Due.Equal(due) || !slices.Equal(d.Jobs, []string{"a", "b"}) {
		t.Fatalf("read back %+v ok %t err %v", d, ok, err)
	}
	if err := WriteJobsDue(path, JobsDue{Due: due}); err == nil {
		t.Error("wrote a jobs-due without jobs")
	}
	for _, text := range []string{`{"jobs":[],"due":"2026-01-02T03:04:05Z"}`, `{"jobs":["a"]}`, `not json`} {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := ReadJobsDue(path); ok || err == nil || !strings.Contains(err.Error(), "want") {
			t.Errorf("%s: ok %t err %v, want an error saying what it wants", text, ok, err)
		}
	}
}
