package assign

import (
	"fmt"
	"slices"
	"testing"
)

// chunked is the proof of concept's contiguous chunking, with its offset bug
// fixed: the jobs in order, cut into one run per worker in ordinal order, the
// first len(jobs) mod len(workers) runs one longer.
func chunked(jobs, workers []string) map[string][]string {
	out := map[string][]string{}
	q, r, at := len(jobs)/len(workers), len(jobs)%len(workers), 0
	for i, w := range workers {
		n := q
		if i < r {
			n++
		}
		out[w] = jobs[at : at+n]
		at += n
	}
	return out
}

// movesScenarios are the changes the benchmark reports: 100 jobs, workers in
// StatefulSet ordinal order.
func movesScenarios() []struct {
	name          string
	before, after []string
} {
	ten, eleven := names("swarm-worker-", 0, 10), names("swarm-worker-", 0, 11)
	return []struct {
		name          string
		before, after []string
	}{
		{"10to11", ten, eleven},
		{"11to10", eleven, ten},
		{"middleLost", ten, slices.Delete(slices.Clone(ten), 5, 6)},
	}
}

// BenchmarkMoves reports, for 100 jobs, how many jobs each change moves
// (moves), the minimum computed independently (min), and the proof of
// concept's chunking (poc-moves).
func BenchmarkMoves(b *testing.B) {
	jobs := names("stream-", 0, 100)
	for _, sc := range movesScenarios() {
		b.Run(sc.name, func(b *testing.B) {
			prev, err := Assign(Input{Jobs: jobs, Workers: sc.before})
			if err != nil {
				b.Fatal(err)
			}
			in := Input{Jobs: jobs, Workers: sc.after, Previous: prev.Assignments}
			var res Result
			for b.Loop() {
				res, _ = Assign(in)
			}
			want, _ := minMoves(in)
			poc := recountMoves(Input{Previous: chunked(jobs, sc.before)}, Result{Assignments: chunked(jobs, sc.after)})
			b.ReportMetric(float64(res.Moved), "moves")
			b.ReportMetric(float64(want), "min")
			b.ReportMetric(float64(poc), "poc-moves")
		})
	}
}

// BenchmarkAssign: 100,000 jobs over 1,000 workers, from nothing (bounded-load
// rendezvous over every worker) and after one worker is added.
func BenchmarkAssign(b *testing.B) {
	for _, nj := range []int{10_000, 100_000} {
		jobs, workers := names("stream-", 0, nj), names("swarm-worker-", 0, 1000)
		b.Run(fmt.Sprintf("fresh/jobs=%d", nj), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Assign(Input{Jobs: jobs, Workers: workers}); err != nil {
					b.Fatal(err)
				}
			}
		})
		prev, _ := Assign(Input{Jobs: jobs, Workers: workers})
		more := names("swarm-worker-", 0, 1001)
		b.Run(fmt.Sprintf("addWorker/jobs=%d", nj), func(b *testing.B) {
			b.ReportAllocs()
			var res Result
			for b.Loop() {
				res, _ = Assign(Input{Jobs: jobs, Workers: more, Previous: prev.Assignments})
			}
			b.ReportMetric(float64(res.Moved), "moves")
		})
	}
}

// BenchmarkAssignLarge: placing from nothing at the largest size the
// assignment is meant for, 1,000,000 jobs over 10,000 workers, and adding a
// worker to it. Run with -benchtime 1x (or a few x): one iteration is the
// figure.
func BenchmarkAssignLarge(b *testing.B) {
	jobs, workers := names("stream-", 0, 1_000_000), names("swarm-worker-", 0, 10_000)
	b.Run("fresh/jobs=1000000/workers=10000", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Assign(Input{Jobs: jobs, Workers: workers}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
