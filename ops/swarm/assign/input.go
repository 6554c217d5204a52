package assign

import (
	"fmt"
	"slices"
	"strings"
)

// Reasons of an *Error: short CamelCase words fit for a condition's reason.
const (
	ReasonEmptyName        = "EmptyName"
	ReasonDuplicateJob     = "DuplicateJob"
	ReasonDuplicateWorker  = "DuplicateWorker"
	ReasonUnknownDedicated = "UnknownDedicatedJob"
	ReasonTooManyDedicated = "TooManyDedicatedJobs"
)

// Error is an input that cannot be assigned. Reason is one of the Reason*
// constants; the message says what to change.
type Error struct {
	Reason  string
	Message string
}

func (e *Error) Error() string { return e.Message }

func inputError(reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// newProblem validates in and puts it in index form.
func newProblem(in Input) (*problem, error) {
	jobs, err := sortedUnique(in.Jobs, "job", ReasonDuplicateJob)
	if err != nil {
		return nil, err
	}
	workers, err := sortedUnique(in.Workers, "worker", ReasonDuplicateWorker)
	if err != nil {
		return nil, err
	}
	p := &problem{jobs: jobs, workers: workers, hj: hashes(jobs), hw: hashes(workers)}
	if err := p.markDedicated(in.Dedicated); err != nil {
		return nil, err
	}
	p.readPrevious(in.Previous)
	return p, nil
}

// sortedUnique returns a sorted copy of names, or an error naming the first
// empty or repeated one.
func sortedUnique(names []string, what, reason string) ([]string, error) {
	out := slices.Clone(names)
	slices.Sort(out)
	for i, n := range out {
		if strings.TrimSpace(n) == "" {
			return nil, inputError(ReasonEmptyName, "a %s name is empty: remove it from the list", what)
		}
		if i > 0 && out[i-1] == n {
			return nil, inputError(reason, "%s %q is listed more than once: list each %s once", what, n, what)
		}
	}
	return out, nil
}

func hashes(names []string) []uint64 {
	out := make([]uint64, len(names))
	for i, n := range names {
		out[i] = nameHash(n)
	}
	return out
}

// markDedicated flags the dedicated jobs; each must be a job. Repeats are
// harmless.
func (p *problem) markDedicated(dedicated []string) error {
	p.dedicated = make([]bool, len(p.jobs))
	for _, d := range dedicated {
		j, ok := slices.BinarySearch(p.jobs, d)
		if !ok {
			return inputError(ReasonUnknownDedicated, "dedicated job %q is not in the job list: add it to the jobs or remove it from dedicated", d)
		}
		p.dedicated[j] = true
	}
	return nil
}

// readPrevious records, per job, the present worker that held it (when two
// present workers both list it, the one ranking it higher) and whether any
// worker, present or gone, held it.
func (p *problem) readPrevious(prev map[string][]string) {
	p.owner = make([]int, len(p.jobs))
	for j := range p.owner {
		p.owner[j] = -1
	}
	p.wasHeld = make([]bool, len(p.jobs))
	p.prevCount = make([]int, len(p.workers))
	for w := range p.prevCount {
		p.prevCount[w] = -1 // no previous share: a new worker
	}
	for name, jobs := range prev {
		w, present := slices.BinarySearch(p.workers, name)
		if present {
			p.prevCount[w] = len(jobs)
		}
		for _, job := range jobs {
			j, ok := slices.BinarySearch(p.jobs, job)
			if !ok {
				continue
			}
			p.wasHeld[j] = true
			if !present {
				continue
			}
			if o := p.owner[j]; o < 0 || score(p.hj[j], p.hw[w]) > score(p.hj[j], p.hw[o]) ||
				(score(p.hj[j], p.hw[w]) == score(p.hj[j], p.hw[o]) && w < o) {
				p.owner[j] = w
			}
		}
	}
}

// checkCapacity refuses the inputs no assignment satisfies.
func checkCapacity(jobs, workers, dedicated int) error {
	if dedicated > workers {
		return inputError(ReasonTooManyDedicated, "%d dedicated jobs need as many workers, and there are %d: add workers or dedicate fewer jobs", dedicated, workers)
	}
	if dedicated == workers && jobs > dedicated {
		return inputError(ReasonTooManyDedicated, "the %d dedicated jobs take every worker, leaving none for the other %d jobs: add workers or dedicate fewer jobs", dedicated, jobs-dedicated)
	}
	return nil
}
