package assign

import (
	"cmp"
	"slices"
)

// chooseDedicated picks the nd workers that take the dedicated jobs, so that
// the most jobs stay where they were, and returns them flagged by worker.
//
// A worker w chosen for a dedicated job gains 1 kept job when it already held
// one (g), and loses what it would have kept as a normal worker: min(a, q) of
// its a held normal jobs (c), plus one more when it was among the workers
// holding more than q that get one of the r larger quotas. With k of the
// chosen workers taken from those holding more than q (E), the jobs kept are
//
//	sum over the chosen of (g - c)  +  min(r, |E| - k)  +  constants,
//
// so for each k the best choice is the k best of E and the nd-k best of the
// others by g - c; the best k is found by trying each.
func (p *problem) chooseDedicated(held [][]int, nd, q, r int) []bool {
	chosen := make([]bool, len(p.workers))
	if nd == 0 {
		return chosen
	}
	gain := make([]int, len(p.workers))
	for j, w := range p.owner {
		if w >= 0 && p.dedicated[j] {
			gain[w] = 1
		}
	}
	var over, rest []int
	value, cost := make([]int, len(p.workers)), make([]int, len(p.workers))
	for w := range p.workers {
		value[w] = gain[w] - min(len(held[w]), q)
		cost[w] = p.restartCost(w, len(held[w]), gain[w], q)
		if len(held[w]) > q {
			over = append(over, w)
		} else {
			rest = append(rest, w)
		}
	}
	byValue := func(a, b int) int {
		return cmp.Or(cmp.Compare(value[b], value[a]), cmp.Compare(cost[a], cost[b]), p.workerOrder(a, b))
	}
	slices.SortFunc(over, byValue)
	slices.SortFunc(rest, byValue)
	k := bestSplit(prefixSums(over, value), prefixSums(rest, value), prefixSums(over, cost), prefixSums(rest, cost), nd, r)
	for _, w := range append(slices.Clone(over[:k]), rest[:nd-k]...) {
		chosen[w] = true
	}
	return chosen
}

// bestSplit returns the k maximising over[k] + rest[nd-k] + min(r, |over|-k),
// where over and rest are prefix sums of the values, and among those the one
// of least restart cost overCost[k] + restCost[nd-k]; the smallest such k.
func bestSplit(over, rest, overCost, restCost []int, nd, r int) int {
	nOver := len(over) - 1
	bestK, best, bestCost := -1, 0, 0
	for k := 0; k <= min(nd, nOver); k++ {
		if nd-k > len(rest)-1 {
			continue
		}
		v := over[k] + rest[nd-k] + min(r, nOver-k)
		c := overCost[k] + restCost[nd-k]
		if bestK < 0 || v > best || (v == best && c < bestCost) {
			bestK, best, bestCost = k, v, c
		}
	}
	return bestK
}

// restartCost is how many more restarts choosing worker w for a dedicated job
// costs than leaving it a normal worker: 1 when it could keep its share as a
// normal worker (it holds only normal jobs, q or q+1 of them, all still
// here) but not as a dedicated one, -1 the other way round (it held exactly
// one job, a dedicated one), else 0. A new worker costs nothing either way.
func (p *problem) restartCost(w, held, gain, q int) int {
	if p.prevCount[w] < 0 {
		return 0
	}
	keepsDedicated := gain == 1 && p.prevCount[w] == 1
	keepsNormal := p.prevCount[w] == held && (held == q || held == q+1)
	return boolInt(!keepsDedicated) - boolInt(!keepsNormal)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func prefixSums(ws []int, value []int) []int {
	out := make([]int, len(ws)+1)
	for i, w := range ws {
		out[i+1] = out[i] + value[w]
	}
	return out
}

// placeDedicated puts each dedicated job on a chosen worker: on the one that
// held it when it was chosen (the job it ranks highest, if it held several),
// the others in canonical order on the free chosen worker ranking them
// highest.
func (p *problem) placeDedicated(chosen []bool, to []int) {
	taken := make([]bool, len(p.workers))
	var pool []int
	for j, d := range p.dedicated {
		if d {
			pool = append(pool, j)
		}
	}
	// Jobs ranked by their owner's score, so a worker keeps its best one.
	slices.SortFunc(pool, func(a, b int) int {
		return cmp.Or(cmp.Compare(p.ownerScore(b), p.ownerScore(a)), cmp.Compare(a, b))
	})
	var rest []int
	for _, j := range pool {
		if w := p.owner[j]; w >= 0 && chosen[w] && !taken[w] {
			to[j], taken[w] = w, true
			continue
		}
		rest = append(rest, j)
	}
	p.sortCanonical(rest)
	var free []int
	for w, c := range chosen {
		if c && !taken[w] {
			free = append(free, w)
		}
	}
	for _, j := range rest {
		i := p.best(j, free)
		to[j] = free[i]
		free = slices.Delete(free, i, i+1)
	}
}

func (p *problem) ownerScore(j int) uint64 {
	if w := p.owner[j]; w >= 0 {
		return score(p.hj[j], p.hw[w])
	}
	return 0
}
