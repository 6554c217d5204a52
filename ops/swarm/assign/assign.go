// Package assign decides which worker of a pool processes each job: every job
// exactly once, worker loads within one of each other, deterministic whatever
// the order of its inputs, and moving the fewest jobs a change allows.
//
// The method is the sticky-quota one of Kafka's sticky assignor over a
// rendezvous (highest random weight) order: with n jobs over m workers, n mod
// m workers get a quota of ceil(n/m) and the rest floor(n/m); the larger
// quotas go to the workers already holding the most; each worker keeps its
// previous jobs up to its quota (the ones it ranks highest); the jobs left
// over are placed, in a canonical order, on the first worker that still has
// room clockwise from the job on a consistent-hashing ring (bounded-load
// consistent hashing: O(jobs x log workers), where asking every worker with
// room for its rendezvous score cost O(jobs x workers)). With no previous
// assignment the result is computed from the jobs and workers alone, so any
// replica rebuilds a lost assignment identically.
//
// Dedicated jobs run alone on a worker. The workers that take them are chosen
// to keep the most jobs where they were (see dedicated.go).
package assign

import (
	"cmp"
	"slices"
)

// Input is one assignment problem. Previous and Dedicated are optional.
type Input struct {
	// Jobs to assign; each name once.
	Jobs []string `json:"jobs"`
	// Workers that take jobs; each name once.
	Workers []string `json:"workers"`
	// Previous is the assignment in force: worker name to its jobs. Workers
	// and jobs no longer present are ignored (their jobs count as moved).
	Previous map[string][]string `json:"previous,omitempty"`
	// Dedicated jobs run alone on a worker; each must be one of Jobs.
	Dedicated []string `json:"dedicated,omitempty"`
}

// Result is an assignment.
type Result struct {
	// Assignments maps every worker to its jobs, sorted; a worker with no
	// job has an empty list.
	Assignments map[string][]string `json:"assignments"`
	// Unassigned lists the jobs no worker took: all of them when there is no
	// worker.
	Unassigned []string `json:"unassigned,omitempty"`
	// Moved counts the jobs that had a worker in Previous and now have
	// another one.
	Moved int `json:"moved"`
}

// problem is an Input in index form: jobs and workers sorted by name, names
// hashed once.
type problem struct {
	jobs, workers []string
	hj, hw        []uint64
	dedicated     []bool // by job
	owner         []int  // by job: the previous worker still present, or -1
	wasHeld       []bool // by job: some previous worker, present or not, held it
	prevCount     []int  // by worker: how many jobs it held before, whatever they are now; -1: none (new)
}

// Assign computes the assignment of in. It returns an *Error when the input
// cannot be assigned (duplicate names, an unknown dedicated job, more
// dedicated jobs than workers).
func Assign(in Input) (Result, error) {
	p, err := newProblem(in)
	if err != nil {
		return Result{}, err
	}
	if len(p.workers) == 0 {
		return Result{Assignments: map[string][]string{}, Unassigned: p.jobs}, nil
	}
	to, err := p.solve()
	if err != nil {
		return Result{}, err
	}
	return p.result(to), nil
}

// solve returns the worker index of every job.
func (p *problem) solve() ([]int, error) {
	nd := 0
	for _, d := range p.dedicated {
		if d {
			nd++
		}
	}
	if err := checkCapacity(len(p.jobs), len(p.workers), nd); err != nil {
		return nil, err
	}
	m := len(p.workers) - nd
	n := len(p.jobs) - nd
	q, r := 0, 0
	if m > 0 {
		q, r = n/m, n%m
	}
	held := p.heldNormal()
	isDedicated := p.chooseDedicated(held, nd, q, r)
	to := make([]int, len(p.jobs))
	for j := range to {
		to[j] = -1
	}
	p.placeDedicated(isDedicated, to)
	room := p.keepNormal(held, isDedicated, q, r, to)
	p.placeRest(room, to)
	return to, nil
}

// heldNormal lists, per worker, the non-dedicated jobs it keeps from the
// previous assignment.
func (p *problem) heldNormal() [][]int {
	held := make([][]int, len(p.workers))
	for j, w := range p.owner {
		if w >= 0 && !p.dedicated[j] {
			held[w] = append(held[w], j)
		}
	}
	return held
}

// keepNormal sets the quotas of the workers without a dedicated job, keeps
// each one's previous jobs up to its quota, and returns the room left on
// every worker.
func (p *problem) keepNormal(held [][]int, isDedicated []bool, q, r int, to []int) []int {
	normal := make([]int, 0, len(p.workers))
	for w, d := range isDedicated {
		if !d {
			normal = append(normal, w)
		}
	}
	p.orderForQuotas(normal, held, q)
	room := make([]int, len(p.workers))
	for i, w := range normal {
		quota := q
		if i < r {
			quota++
		}
		keep := held[w]
		if len(keep) > quota {
			slices.SortFunc(keep, func(a, b int) int {
				return cmp.Or(cmp.Compare(score(p.hj[b], p.hw[w]), score(p.hj[a], p.hw[w])), cmp.Compare(a, b))
			})
			keep = keep[:quota]
		}
		for _, j := range keep {
			to[j] = w
		}
		room[w] = quota - len(keep)
	}
	return room
}

// orderForQuotas sorts the workers without a dedicated job in the order
// they take the larger quotas: first those holding more than the smaller
// quota (each keeps one more job, one move fewer), and among them first
// those whose share then stays as it was; then the workers
// whose share changes anyway (new ones, those holding fewer, or whose held
// jobs are gone or taken elsewhere); last those holding exactly the smaller quota, whose share a
// larger quota would change for nothing. Moves are the fewest either way;
// this makes the workers whose share changes (restarts) the fewest too.
func (p *problem) orderForQuotas(normal []int, held [][]int, q int) {
	keepsShare := func(w int) bool { return p.prevCount[w] == len(held[w]) }
	rank := func(w int) int {
		switch h := len(held[w]); {
		case h > q:
			return 0
		case h < q || !keepsShare(w):
			return 1
		}
		return 2
	}
	slices.SortFunc(normal, func(a, b int) int {
		ra, rb := rank(a), rank(b)
		if ra != rb {
			return cmp.Compare(ra, rb)
		}
		if ra == 0 {
			stays := func(w int) bool { return keepsShare(w) && len(held[w]) == q+1 }
			if sa, sb := stays(a), stays(b); sa != sb {
				return cmp.Compare(boolRank(sa), boolRank(sb))
			}
		}
		return p.workerOrder(a, b)
	})
}

// boolRank orders true first.
func boolRank(b bool) int {
	if b {
		return 0
	}
	return 1
}

// placeRest puts every job without a worker yet, in canonical order, on the
// first worker with room clockwise from it on the placement ring (see ring.go).
func (p *problem) placeRest(room []int, to []int) {
	var pool []int
	for j, w := range to {
		if w < 0 {
			pool = append(pool, j)
		}
	}
	if len(pool) == 0 {
		return
	}
	p.sortCanonical(pool)
	r := p.newRing(room)
	for _, j := range pool {
		w := r.take(jobPosition(p.hj[j]))
		to[j] = w
		if room[w]--; room[w] == 0 {
			r.close(w)
		}
	}
}

// best returns the position in open of the worker that ranks job j highest
// (ties, practically never seen, go to the lower worker index).
func (p *problem) best(j int, open []int) int {
	best, bestScore := 0, uint64(0)
	hj := p.hj[j]
	for i, w := range open {
		s := score(hj, p.hw[w])
		if i == 0 || s > bestScore || (s == bestScore && w < open[best]) {
			best, bestScore = i, s
		}
	}
	return best
}

// sortCanonical orders jobs by hash, then name: the order in which they are
// placed, independent of the input's order.
func (p *problem) sortCanonical(jobs []int) {
	slices.SortFunc(jobs, func(a, b int) int {
		return cmp.Or(cmp.Compare(p.hj[a], p.hj[b]), cmp.Compare(a, b))
	})
}

// workerOrder is the tie-break between workers: by hash, then name.
func (p *problem) workerOrder(a, b int) int {
	return cmp.Or(cmp.Compare(p.hw[a], p.hw[b]), cmp.Compare(a, b))
}

// result turns worker indexes back into names and counts the moves.
func (p *problem) result(to []int) Result {
	res := Result{Assignments: make(map[string][]string, len(p.workers))}
	lists := make([][]string, len(p.workers))
	for j, w := range to {
		lists[w] = append(lists[w], p.jobs[j]) // jobs are sorted, so lists are too
		if p.wasHeld[j] && p.owner[j] != w {
			res.Moved++
		}
	}
	for w, name := range p.workers {
		if lists[w] == nil {
			lists[w] = []string{}
		}
		res.Assignments[name] = lists[w]
	}
	return res
}
