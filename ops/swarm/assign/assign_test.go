package assign

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func names(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s%d", prefix, i))
	}
	return out
}

func mustAssign(t *testing.T, in Input) Result {
	t.Helper()
	res, err := Assign(in)
	if err != nil {
		t.Fatalf("Assign(%s): %v", describe(in), err)
	}
	checkProperties(t, in, res)
	return res
}

func TestScaleChanges(t *testing.T) {
	jobs := names("stream-", 0, 100)
	ten := names("swarm-worker-", 0, 10)
	eleven := names("swarm-worker-", 0, 11)
	middleLost := slices.Delete(slices.Clone(ten), 5, 6)
	from10 := mustAssign(t, Input{Jobs: jobs, Workers: ten}).Assignments
	from11 := mustAssign(t, Input{Jobs: jobs, Workers: eleven}).Assignments
	for _, tc := range []struct {
		name    string
		workers []string
		prev    map[string][]string
		moved   int
	}{
		{"10 to 11 workers", eleven, from10, 9},
		{"11 to 10 workers", ten, from11, len(from11["swarm-worker-10"])},
		{"middle worker lost", middleLost, from10, 10},
		{"nothing changed", ten, from10, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := mustAssign(t, Input{Jobs: jobs, Workers: tc.workers, Previous: tc.prev})
			if res.Moved != tc.moved {
				t.Errorf("moved %d, want %d", res.Moved, tc.moved)
			}
		})
	}
}

// The proof of concept's bug: 27 jobs over 2 workers duplicated one and
// dropped another.
func TestUnevenCounts(t *testing.T) {
	for _, c := range [][2]int{{27, 2}, {1, 3}, {0, 4}, {7, 7}, {100, 3}} {
		res := mustAssign(t, Input{Jobs: names("j", 0, c[0]), Workers: names("w", 0, c[1])})
		for w, jobs := range res.Assignments {
			if len(jobs) < c[0]/c[1] || len(jobs) > (c[0]+c[1]-1)/c[1] {
				t.Errorf("%d jobs over %d workers: %s has %d", c[0], c[1], w, len(jobs))
			}
		}
	}
}

func TestJobEdits(t *testing.T) {
	workers := names("w", 0, 4)
	prev := mustAssign(t, Input{Jobs: names("j", 0, 20), Workers: workers}).Assignments
	// Removing jobs 0..3 and adding 20..27: the 20 - 4 survivors stay, unless
	// a worker lost none and now holds more than 6.
	res := mustAssign(t, Input{Jobs: names("j", 4, 28), Workers: workers, Previous: prev})
	if res.Moved > 2 {
		t.Errorf("moved %d on a job edit", res.Moved)
	}
}

func TestNoWorkers(t *testing.T) {
	res, err := Assign(Input{Jobs: []string{"b", "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Assignments) != 0 || !slices.Equal(res.Unassigned, []string{"a", "b"}) {
		t.Errorf("got %+v, want every job unassigned", res)
	}
}

// A lost assignment is rebuilt identically, and is a fixed point.
func TestStateless(t *testing.T) {
	in := Input{Jobs: names("cam-", 0, 50), Workers: names("pod-", 0, 7), Dedicated: []string{"cam-3"}}
	first := mustAssign(t, in)
	in.Previous = first.Assignments
	again := mustAssign(t, in)
	if again.Moved != 0 || fmt.Sprint(again.Assignments) != fmt.Sprint(first.Assignments) {
		t.Errorf("assignment is not a fixed point: %v then %v", first, again)
	}
}

func TestDedicated(t *testing.T) {
	workers := names("w", 0, 4)
	in := Input{Jobs: names("j", 0, 10), Workers: workers, Dedicated: []string{"j1", "j2"}}
	res := mustAssign(t, in)
	// Dedicating one more job moves it onto a worker of its own.
	in.Previous, in.Dedicated = res.Assignments, []string{"j1", "j2", "j5"}
	mustAssign(t, in)
	// A dedicated job's worker lost: it goes to another worker alone.
	in.Previous, in.Workers, in.Dedicated = res.Assignments, names("w", 0, 5), []string{"j1", "j2"}
	mustAssign(t, in)
}

func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		in     Input
		reason string
	}{
		{Input{Jobs: []string{"a", "b", "a"}, Workers: []string{"w"}}, ReasonDuplicateJob},
		{Input{Jobs: []string{"a", " "}, Workers: []string{"w"}}, ReasonEmptyName},
		{Input{Jobs: []string{"a"}, Workers: []string{"w", "w"}}, ReasonDuplicateWorker},
		{Input{Jobs: []string{"a"}, Workers: []string{"w"}, Dedicated: []string{"b"}}, ReasonUnknownDedicated},
		{Input{Jobs: []string{"a", "b", "c"}, Workers: []string{"w", "v"}, Dedicated: []string{"a", "b", "c"}}, ReasonTooManyDedicated},
		{Input{Jobs: []string{"a", "b", "c"}, Workers: []string{"w", "v"}, Dedicated: []string{"a", "b"}}, ReasonTooManyDedicated},
	} {
		_, err := Assign(tc.in)
		var e *Error
		if !errors.As(err, &e) || e.Reason != tc.reason {
			t.Errorf("Assign(%s) = %v, want reason %s", describe(tc.in), err, tc.reason)
		}
	}
}

// scenario builds a random change from seed: a previous state (the result of
// an earlier assignment, or an arbitrary uneven one), then workers added or
// removed anywhere, jobs added or removed, maybe dedicated jobs.
func scenario(seed uint64, nJobs, nWorkers, change uint8) Input {
	r := rand.New(rand.NewPCG(seed, uint64(change)))
	jobs := names("job-", 0, int(nJobs%60))
	workers := names("w-", 0, int(nWorkers%10)+1)
	prev := map[string][]string{}
	if change&1 == 0 {
		if res, err := Assign(Input{Jobs: jobs, Workers: workers}); err == nil {
			prev = res.Assignments
		}
	} else {
		for _, j := range jobs {
			if r.IntN(5) > 0 {
				w := workers[r.IntN(len(workers))]
				prev[w] = append(prev[w], j)
			}
		}
	}
	in := Input{Jobs: mutate(r, jobs, "job-new-", 8), Workers: mutate(r, workers, "w-new-", 3), Previous: prev}
	if change&2 != 0 && len(in.Jobs) > 0 && len(in.Workers) > 1 {
		for range r.IntN(min(3, len(in.Workers))) + 1 {
			in.Dedicated = append(in.Dedicated, in.Jobs[r.IntN(len(in.Jobs))])
		}
		slices.Sort(in.Dedicated)
		in.Dedicated = slices.Compact(in.Dedicated)
	}
	return in
}

// mutate removes a random number of names anywhere in s and adds up to add new ones.
func mutate(r *rand.Rand, s []string, prefix string, add int) []string {
	var out []string
	for _, x := range s {
		if r.IntN(4) > 0 {
			out = append(out, x)
		}
	}
	return append(out, names(prefix, 0, r.IntN(add+1))...)
}

func TestProperties(t *testing.T) {
	for seed := range uint64(3000) {
		in := scenario(seed, uint8(seed*7), uint8(seed*3), uint8(seed))
		res, err := Assign(in)
		var e *Error
		if errors.As(err, &e) && e.Reason == ReasonTooManyDedicated {
			continue
		}
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		checkProperties(t, in, res)
	}
}

func FuzzAssign(f *testing.F) {
	f.Add(uint64(1), uint8(100), uint8(9), uint8(0))
	f.Add(uint64(2), uint8(27), uint8(1), uint8(1))
	f.Add(uint64(3), uint8(40), uint8(6), uint8(2))
	f.Add(uint64(4), uint8(13), uint8(8), uint8(3))
	f.Fuzz(func(t *testing.T, seed uint64, nJobs, nWorkers, change uint8) {
		in := scenario(seed, nJobs, nWorkers, change)
		res, err := Assign(in)
		var e *Error
		if errors.As(err, &e) && e.Reason == ReasonTooManyDedicated {
			t.Skip(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		checkProperties(t, in, res)
	})
}

// TestPropertiesLarge: bigger pools (up to 2,000 jobs over 60 workers),
// chained changes, the minimum by the quota formula.
func TestPropertiesLarge(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	jobs, workers := names("job-", 0, 1500), names("w-", 0, 40)
	prev := map[string][]string{}
	for step := range 60 {
		in := Input{Jobs: mutate(r, jobs, fmt.Sprintf("job-%d-", step), 200), Workers: mutate(r, workers, fmt.Sprintf("w-%d-", step), 20), Previous: prev}
		if len(in.Workers) == 0 {
			in.Workers = []string{"w-last"}
		}
		res, err := Assign(in)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		checkProperties(t, in, res)
		jobs, workers, prev = in.Jobs, in.Workers, res.Assignments
	}
}

// TestFit: too few workers for the dedicated jobs place the most jobs that
// fit instead of refusing; the dedicated jobs already running stay.
func TestFit(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   Input
		out  []string // left out
	}{
		{"enough workers", Input{Jobs: []string{"a", "b", "c"}, Workers: []string{"w", "v"}, Dedicated: []string{"a"}}, nil},
		{"only dedicated jobs, as many as workers", Input{Jobs: []string{"a", "b"}, Workers: []string{"w", "v"}, Dedicated: []string{"a", "b"}}, nil},
		{"a worker kept for the others", Input{Jobs: []string{"a", "b", "c"}, Workers: []string{"w", "v"}, Dedicated: []string{"a", "b"}}, []string{"b"}},
		{"the running one stays", Input{Jobs: []string{"a", "b", "c"}, Workers: []string{"w", "v"}, Dedicated: []string{"a", "b"},
			Previous: map[string][]string{"v": {"b"}, "gone": {"a"}}}, []string{"a"}},
		{"one worker: the others run", Input{Jobs: []string{"a", "b", "c"}, Workers: []string{"w"}, Dedicated: []string{"a", "b"}}, []string{"a", "b"}},
		{"no worker", Input{Jobs: []string{"a"}, Dedicated: []string{"a"}}, []string{"a"}},
		{"more dedicated than workers", Input{Jobs: []string{"a", "b", "c"}, Workers: []string{"w", "v"}, Dedicated: []string{"a", "b", "c"}}, []string{"c"}},
		{"bad input is left to Assign", Input{Jobs: []string{"a", "a"}, Workers: []string{"w"}, Dedicated: []string{"a"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fit, out := Fit(tc.in)
			if !slices.Equal(out, tc.out) {
				t.Fatalf("left out %v, want %v", out, tc.out)
			}
			if tc.out == nil {
				return
			}
			res, err := Assign(fit)
			if err != nil {
				t.Fatalf("the fitted input is refused: %v", err)
			}
			placed := 0
			for _, js := range res.Assignments {
				placed += len(js)
			}
			if placed != len(tc.in.Jobs)-len(tc.out) {
				t.Errorf("placed %d jobs, want %d", placed, len(tc.in.Jobs)-len(tc.out))
			}
		})
	}
}

// TestDedicatedRestarts: cases the random checker found where one more
// existing worker restarted than needed: a new dedicated job went to an
// existing idle worker (whose empty share then changed) instead of a new one.
func TestDedicatedRestarts(t *testing.T) {
	for _, in := range []Input{
		{Jobs: []string{"job-0", "job-1", "job-new-0"}, Workers: []string{"w-0", "w-1", "w-2", "w-new-0", "w-new-1", "w-new-2"},
			Dedicated: []string{"job-0", "job-new-0"}, Previous: map[string][]string{"w-0": {"job-0"}, "w-1": {"job-1"}, "w-2": {}}},
		{Jobs: []string{"job-0", "job-1", "job-new-0"}, Workers: []string{"w-1", "w-2", "w-3", "w-4", "w-5", "w-new-0", "w-new-1"},
			Dedicated: []string{"job-1", "job-new-0"},
			Previous:  map[string][]string{"w-0": {"job-0"}, "w-1": {"job-1"}, "w-2": {}, "w-3": {}, "w-4": {}, "w-5": {}, "w-6": {}}},
	} {
		mustAssign(t, in) // checkProperties counts the restarts against the brute-force fewest
	}
}
