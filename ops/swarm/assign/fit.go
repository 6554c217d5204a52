package assign

import (
	"cmp"
	"slices"
)

// Check validates the job list and the dedicated jobs alone (names given,
// each once, every dedicated job listed): the errors Assign would return
// whatever the workers.
func Check(jobs, dedicated []string) error {
	_, err := newProblem(Input{Jobs: jobs, Dedicated: dedicated})
	return err
}

// Fit reduces in to what its workers can run when they are too few for its
// dedicated jobs (dedicated jobs at least as many as the workers, other jobs
// waiting): instead of refusing, the most jobs that fit are placed. Each
// dedicated job needs a worker alone; while there are other jobs one worker
// is kept for them (leaving out one dedicated job rather than all the
// others). The dedicated jobs kept are first those a worker of in.Workers
// already runs (they stay where they run), then by name. Fit returns the
// input to assign and the dedicated jobs left out, sorted (nil when all
// fit). An input Check refuses is returned as it is.
func Fit(in Input) (Input, []string) {
	if Check(in.Jobs, in.Dedicated) != nil {
		return in, nil
	}
	dedicated := slices.Sorted(slices.Values(in.Dedicated))
	dedicated = slices.Compact(dedicated)
	room := len(in.Workers)
	if len(in.Jobs) > len(dedicated) {
		room-- // keep a worker for the other jobs
	}
	room = max(room, 0)
	if len(dedicated) <= room {
		return in, nil
	}
	running := map[string]bool{}
	for _, w := range in.Workers {
		for _, j := range in.Previous[w] {
			running[j] = true
		}
	}
	slices.SortStableFunc(dedicated, func(a, b string) int {
		return cmp.Compare(boolRank(running[a]), boolRank(running[b]))
	})
	keep, out := dedicated[:room], slices.Sorted(slices.Values(dedicated[room:]))
	left := make(map[string]bool, len(out))
	for _, j := range out {
		left[j] = true
	}
	fit := in
	fit.Dedicated = slices.Clone(keep)
	fit.Jobs = slices.DeleteFunc(slices.Clone(in.Jobs), func(j string) bool { return left[j] })
	return fit, out
}
