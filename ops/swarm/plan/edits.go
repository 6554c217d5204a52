package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/swarm/config"
)

// JobsHash identifies a job set, whatever its order.
func JobsHash(jobs []string) string {
	sorted := slices.Clone(jobs)
	slices.Sort(sorted)
	sum := sha256.Sum256([]byte(strings.Join(sorted, "\n")))
	return hex.EncodeToString(sum[:8])
}

// distrustEdits returns c with the version of every share that is not the
// one the controller wrote (status.workers[].jobsHash) set to 0: a
// ConfigMap edited by hand says nothing of what its workers run, so those
// workers get a new version, and refresh. Before the first status (a
// ConfigMap adopted from elsewhere) every share is trusted.
func distrustEdits(c config.Config, st swarmv1.SwarmStatus) config.Config {
	if len(st.Workers) == 0 {
		return c
	}
	written := map[string]string{}
	for _, w := range st.Workers {
		written[w.Pod] = w.JobsHash
	}
	out := config.Config{Version: c.Version, Workloads: make(map[string]config.Workload, len(c.Workloads))}
	for name, wl := range c.Workloads {
		if h, ok := written[name]; !ok || h != JobsHash(wl.Jobs) {
			wl.Version = 0
		}
		out.Workloads[name] = wl
	}
	return out
}
