package assign

import "hash/fnv"

// nameHash is a stable 64-bit hash of a job or worker name: FNV-1a, the same
// on every replica and every architecture, so any replica computes the same
// assignment.
func nameHash(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}

// score is the rendezvous (highest random weight) score of a job on a worker,
// from their name hashes: the splitmix64 finalizer of their combination, so
// that every bit of both names moves every bit of the score.
func score(job, worker uint64) uint64 {
	z := job ^ (worker * 0x9e3779b97f4a7c15)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
