package assign

import (
	"cmp"
	"slices"
)

// ringPoints is how many points each worker has on the placement ring: enough
// that every worker's arcs add up to about its share, few enough that the
// ring of 10,000 workers sorts in milliseconds.
const ringPoints = 32

// ringSalt separates a job's position on the ring from its name hash, which
// the rendezvous score also uses.
const ringSalt = 0x5bd1e9955bd1e995

// ring is bounded-load consistent hashing over the workers with room: a job
// goes to the worker owning the first point at or after the job's position,
// clockwise, skipping the workers that are full. A full worker's points are
// skipped by a union-find of "next open point" with path compression, so
// each placement costs a binary search and amortised constant time: placing
// n jobs on m workers costs O(n log m) instead of the O(n x m) of asking
// every open worker for its rendezvous score.
type ring struct {
	pos    []uint64 // point positions, sorted
	worker []int    // by point: its worker
	next   []int    // by point: itself while its worker has room, else a later point
	points [][]int  // by worker: its points
}

// newRing builds the ring of the workers with room[w] > 0.
func (p *problem) newRing(room []int) *ring {
	type point struct {
		pos uint64
		w   int
	}
	var pts []point
	for w, n := range room {
		if n > 0 {
			for k := range ringPoints {
				pts = append(pts, point{score(p.hw[w], uint64(k)+1), w})
			}
		}
	}
	slices.SortFunc(pts, func(a, b point) int { return cmp.Or(cmp.Compare(a.pos, b.pos), cmp.Compare(a.w, b.w)) })
	r := &ring{pos: make([]uint64, len(pts)), worker: make([]int, len(pts)), next: make([]int, len(pts)), points: make([][]int, len(room))}
	for i, pt := range pts {
		r.pos[i], r.worker[i], r.next[i] = pt.pos, pt.w, i
		r.points[pt.w] = append(r.points[pt.w], i)
	}
	return r
}

// jobPosition is where job hash hj sits on the ring.
func jobPosition(hj uint64) uint64 { return score(hj, ringSalt) }

// take returns the worker with room that follows position pos on the ring.
// Some worker must still have room.
func (r *ring) take(pos uint64) int {
	i, _ := slices.BinarySearch(r.pos, pos)
	if i == len(r.pos) {
		i = 0
	}
	return r.worker[r.find(i)]
}

// find returns the first open point at or after point i, compressing the path.
func (r *ring) find(i int) int {
	root := i
	for r.next[root] != root {
		root = r.next[root]
	}
	for r.next[i] != root {
		i, r.next[i] = r.next[i], root
	}
	return root
}

// close marks worker w full: its points lead to the next ones.
func (r *ring) close(w int) {
	for _, i := range r.points[w] {
		r.next[i] = (i + 1) % len(r.next)
	}
}
