package assign

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// This file holds the test side's own view of the four properties: it knows
// nothing of how Assign works, only what its result must satisfy.

// checkProperties fails t unless res, computed from in, assigns every job
// exactly once, balances the loads, is deterministic whatever the input's
// order, and moves exactly the minimum number of jobs.
func checkProperties(t *testing.T, in Input, res Result) {
	t.Helper()
	checkExactlyOnce(t, in, res)
	checkBalance(t, in, res)
	if got := recountMoves(in, res); got != res.Moved {
		t.Errorf("result says %d moved, its lists show %d", res.Moved, got)
	}
	if want, ok := minMoves(in); ok && res.Moved != want {
		t.Errorf("moved %d jobs, the minimum is %d (input %s)", res.Moved, want, describe(in))
	}
	checkDeterministic(t, in, res)
	if want, ok := minChanged(in); ok {
		if got := changedWorkers(in, res); got != want {
			t.Errorf("%d existing workers' shares changed, the fewest among the assignments of fewest moves is %d (input %s)", got, want, describe(in))
		}
	}
}

// changedWorkers counts the workers of in.Previous still present whose job
// set res changed (each would be restarted).
func changedWorkers(in Input, res Result) int {
	n := 0
	for w, prev := range in.Previous {
		if now, ok := res.Assignments[w]; ok && !sameSet(prev, now) {
			n++
		}
	}
	return n
}

func sameSet(a, b []string) bool {
	as, bs := slices.Clone(a), slices.Clone(b)
	slices.Sort(as)
	slices.Sort(bs)
	return slices.Equal(as, bs)
}

// minChanged computes by brute force, over which workers take the dedicated
// jobs and which take the larger quotas, the fewest existing workers whose
// job set must change among the assignments that move the fewest jobs. ok is
// false with a job listed twice in Previous, more than 12 workers, or more
// than 9 with dedicated jobs, or when no assignment is valid.
func minChanged(in Input) (int, bool) {
	m, nd := len(in.Workers), len(in.Dedicated)
	if m == 0 || m > 12 || (nd > 0 && m > 9) || nd > m || (nd == m && len(in.Jobs) > nd) {
		return 0, false
	}
	jobSet, dedicated, seen := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, j := range in.Jobs {
		jobSet[j] = true
	}
	for _, d := range in.Dedicated {
		dedicated[d] = true
	}
	held, prevCount, existing, holdsDedicated := make([]int, m), make([]int, m), make([]bool, m), make([]bool, m)
	for i, w := range in.Workers {
		prev, ok := in.Previous[w]
		existing[i], prevCount[i] = ok, len(prev)
		for _, j := range prev {
			if seen[j] {
				return 0, false
			}
			seen[j] = true
			switch {
			case dedicated[j]:
				holdsDedicated[i] = true
			case jobSet[j]:
				held[i]++
			}
		}
	}
	for w, prev := range in.Previous {
		if !slices.Contains(in.Workers, w) {
			for _, j := range prev {
				if seen[j] {
					return 0, false
				}
				seen[j] = true
			}
		}
	}
	bestKeep, best := -1, 0
	forEachSubset(m, nd, func(ded []bool) {
		keepDed, changedDed, normal := 0, 0, []int{}
		for i := range m {
			if ded[i] {
				if holdsDedicated[i] {
					keepDed++
				}
				// A worker keeps its share only when it was that one dedicated job.
				if existing[i] && !(holdsDedicated[i] && prevCount[i] == 1) {
					changedDed++
				}
				continue
			}
			normal = append(normal, i)
		}
		if len(normal) == 0 {
			if keepDed > bestKeep || (keepDed == bestKeep && changedDed < best) {
				bestKeep, best = keepDed, changedDed
			}
			return
		}
		n := len(in.Jobs) - nd
		q, r := n/len(normal), n%len(normal)
		forEachSubset(len(normal), r, func(big []bool) {
			keep, changed := keepDed, changedDed
			for k, i := range normal {
				quota := q + boolInt(big[k])
				keep += min(held[i], quota)
				if existing[i] && !(prevCount[i] == held[i] && held[i] == quota) {
					changed++
				}
			}
			if keep > bestKeep || (keep == bestKeep && changed < best) {
				bestKeep, best = keep, changed
			}
		})
	})
	return best, true
}

func checkExactlyOnce(t *testing.T, in Input, res Result) {
	t.Helper()
	if len(res.Assignments) != len(in.Workers) {
		t.Errorf("%d workers in the result, want %d", len(res.Assignments), len(in.Workers))
	}
	seen := map[string]string{}
	for w, jobs := range res.Assignments {
		if !slices.Contains(in.Workers, w) {
			t.Errorf("unknown worker %q in the result", w)
		}
		for _, j := range jobs {
			if other, dup := seen[j]; dup {
				t.Errorf("job %q on both %q and %q", j, other, w)
			}
			seen[j] = w
		}
	}
	for _, j := range res.Unassigned {
		seen[j] = ""
	}
	for _, j := range in.Jobs {
		if _, ok := seen[j]; !ok {
			t.Errorf("job %q assigned to no worker", j)
		}
	}
	if len(seen) != len(in.Jobs) {
		t.Errorf("%d jobs in the result, want %d", len(seen), len(in.Jobs))
	}
	if len(in.Workers) > 0 && len(res.Unassigned) > 0 {
		t.Errorf("%d jobs unassigned with %d workers", len(res.Unassigned), len(in.Workers))
	}
}

func checkBalance(t *testing.T, in Input, res Result) {
	t.Helper()
	lo, hi := -1, -1
	for w, jobs := range res.Assignments {
		if len(jobs) == 1 && slices.Contains(in.Dedicated, jobs[0]) {
			continue
		}
		for _, j := range jobs {
			if slices.Contains(in.Dedicated, j) {
				t.Errorf("dedicated job %q shares worker %q with %v", j, w, jobs)
			}
		}
		if lo < 0 || len(jobs) < lo {
			lo = len(jobs)
		}
		hi = max(hi, len(jobs))
	}
	if hi-lo > 1 {
		t.Errorf("loads range from %d to %d", lo, hi)
	}
}

func checkDeterministic(t *testing.T, in Input, res Result) {
	t.Helper()
	shuffled := Input{
		Jobs: shuffle(in.Jobs), Workers: shuffle(in.Workers), Dedicated: shuffle(in.Dedicated),
		Previous: map[string][]string{},
	}
	for w, jobs := range in.Previous {
		shuffled.Previous[w] = shuffle(jobs)
	}
	again, err := Assign(shuffled)
	if err != nil {
		t.Fatalf("shuffled input refused: %v", err)
	}
	if fmt.Sprint(again) != fmt.Sprint(res) {
		t.Errorf("shuffled input gives another result:\n%v\n%v", res, again)
	}
}

// recountMoves counts the jobs whose worker in res is not their worker in
// in.Previous.
func recountMoves(in Input, res Result) int {
	before := map[string]string{}
	for w, jobs := range in.Previous {
		for _, j := range jobs {
			before[j] = w
		}
	}
	n := 0
	for w, jobs := range res.Assignments {
		for _, j := range jobs {
			if b, ok := before[j]; ok && b != w {
				n++
			}
		}
	}
	return n
}

// minMoves computes, by brute force over which workers take the dedicated
// jobs and which take the larger quotas, the fewest jobs any balanced
// assignment must move. ok is false when the input is too large to search
// (more than 9 workers with dedicated jobs) or has no valid assignment.
func minMoves(in Input) (int, bool) {
	nw, nd := len(in.Workers), len(in.Dedicated)
	if nw == 0 || nd > nw || (nd == nw && len(in.Jobs) > nd) || (nd > 0 && nw > 9) {
		return 0, false
	}
	jobSet := map[string]bool{}
	for _, j := range in.Jobs {
		jobSet[j] = true
	}
	dedicated := map[string]bool{}
	for _, d := range in.Dedicated {
		dedicated[d] = true
	}
	held, holdsDedicated, prevHeld := map[string]int{}, map[string]bool{}, 0
	for w, jobs := range in.Previous {
		for _, j := range jobs {
			if !jobSet[j] {
				continue
			}
			prevHeld++
			if dedicated[j] {
				holdsDedicated[w] = true
			} else {
				held[w]++
			}
		}
	}
	n, m := len(in.Jobs)-nd, nw-nd
	best := -1
	forEachSubset(nw, nd, func(ded []bool) {
		kept, normal := 0, []int{}
		for i, w := range in.Workers {
			if ded[i] {
				if holdsDedicated[w] {
					kept++
				}
			} else {
				normal = append(normal, held[w])
			}
		}
		best = max(best, kept+bestQuotaKeep(normal, n, m))
	})
	return prevHeld - best, true
}

// bestQuotaKeep is the most previous jobs m workers holding held[i] each can
// keep with n jobs split in quotas of n/m, n%m of them one larger: by brute
// force over which workers get the larger ones when m is small, else by
// giving them to the workers holding the most.
func bestQuotaKeep(held []int, n, m int) int {
	if m == 0 {
		return 0
	}
	q, r := n/m, n%m
	if m > 12 {
		sorted := slices.Clone(held)
		slices.Sort(sorted)
		slices.Reverse(sorted)
		total := 0
		for i, h := range sorted {
			total += min(h, q+boolInt(i < r))
		}
		return total
	}
	best := 0
	forEachSubset(m, r, func(big []bool) {
		total := 0
		for i, h := range held {
			total += min(h, q+boolInt(big[i]))
		}
		best = max(best, total)
	})
	return best
}

// forEachSubset calls f with every k-element subset of n as flags.
func forEachSubset(n, k int, f func([]bool)) {
	flags := make([]bool, n)
	var rec func(i, left int)
	rec = func(i, left int) {
		if left == 0 {
			f(flags)
			return
		}
		if n-i < left {
			return
		}
		flags[i] = true
		rec(i+1, left-1)
		flags[i] = false
		rec(i+1, left)
	}
	rec(0, k)
}

func shuffle(s []string) []string {
	out := slices.Clone(s)
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func describe(in Input) string {
	return fmt.Sprintf("%d jobs, workers %v, dedicated %v, previous %v", len(in.Jobs), in.Workers, in.Dedicated, in.Previous)
}
