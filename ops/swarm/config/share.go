package config

import (
	"slices"
)

// ShareAnnotation is the annotation of a worker's pod holding its share, in
// the format of config.yml restricted to that one worker:
//
//	version: 9
//	workloads:
//	  swarm-worker-0: {jobs: [cam-02, cam-05], version: 8}
//
// with no workload when the worker has no share. The worker reads it as a
// file the kubelet keeps up to date (a downwardAPI volume), so it needs no
// right to read anything, sees no other worker's share, and a change of one
// share is sent to one kubelet only.
const ShareAnnotation = "swarm.slipway.dev/share"

// ShareOf is c restricted to worker w's share (its releasing jobs left out:
// the worker ignores them).
func (c Config) ShareOf(w string) Config {
	out := Config{Version: c.Version, Workloads: map[string]Workload{}}
	if s, ok := c.Workloads[w]; ok {
		out.Workloads[w] = Workload{Jobs: slices.Clone(s.Jobs), Version: s.Version}
	}
	return out
}

// SameShare tells whether a and b give worker w the same share (or both
// none), whatever their config versions.
func SameShare(a, b Config, w string) bool {
	sa, oka := a.Workloads[w]
	sb, okb := b.Workloads[w]
	if oka != okb {
		return false
	}
	return !oka || (sa.Version == sb.Version && SameJobs(sa.Jobs, sb.Jobs))
}
