package plan

import (
	"math"
	"sort"
	"strings"
	"time"
)

// Candidate is a node the canary may run on.
type Candidate struct {
	Name   string
	Labels map[string]string
	// Restarts is the restart count of the ExtendedDaemonSet's pod there.
	Restarts int32
}

// CanaryNodes picks n canary nodes among candidates. Nodes already in
// current stay (while still candidates); the rest are chosen by fewest
// restarts, then name, spread so that no combination of the values of
// antiAffinityKeys holds more than ceil(n / number of combinations) nodes.
// When the spread leaves nodes missing, the limit is lifted for them.
func CanaryNodes(candidates []Candidate, n int, antiAffinityKeys []string, current []string) []string {
	if n <= 0 {
		return nil
	}
	byName := map[string]Candidate{}
	groups := map[string]bool{}
	for _, c := range candidates {
		byName[c.Name] = c
		groups[groupOf(c, antiAffinityKeys)] = true
	}
	limit := n
	if len(antiAffinityKeys) > 0 && len(groups) > 0 {
		limit = int(math.Ceil(float64(n) / float64(len(groups))))
	}
	var out []string
	taken, perGroup := map[string]bool{}, map[string]int{}
	take := func(c Candidate) {
		out = append(out, c.Name)
		taken[c.Name] = true
		perGroup[groupOf(c, antiAffinityKeys)]++
	}
	for _, name := range current {
		if c, ok := byName[name]; ok && len(out) < n && !taken[name] {
			take(c)
		}
	}
	sorted := append([]Candidate{}, candidates...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].Restarts != sorted[j].Restarts {
			return sorted[i].Restarts < sorted[j].Restarts
		}
		return sorted[i].Name < sorted[j].Name
	})
	for _, spread := range []bool{true, false} {
		for _, c := range sorted {
			if len(out) >= n {
				break
			}
			if !taken[c.Name] && (!spread || perGroup[groupOf(c, antiAffinityKeys)] < limit) {
				take(c)
			}
		}
	}
	sort.Strings(out)
	return out
}

func groupOf(c Candidate, keys []string) string {
	vals := make([]string, len(keys))
	for i, k := range keys {
		vals[i] = c.Labels[k]
	}
	return strings.Join(vals, "\x00")
}

// Action is a canary verdict.
type Action string

// Verdicts.
const (
	Continue Action = "Continue"
	Pause    Action = "Pause"
	Fail     Action = "Fail"
	Validate Action = "Validate"
)

// CanaryPolicy is a canary's effective settings (defaults applied).
type CanaryPolicy struct {
	Manual               bool
	Duration             time.Duration
	NoRestartsDuration   time.Duration
	AutoPause            bool
	PauseMaxRestarts     int32
	MaxSlowStartDuration time.Duration
	AutoFail             bool
	FailMaxRestarts      int32
	MaxRestartsDuration  time.Duration // 0: no limit
	CanaryTimeout        time.Duration // 0: no limit (the controller sets a default)
}

// CanaryState is what is known of a running canary.
type CanaryState struct {
	Now   time.Time
	Start time.Time // when the canary's ERS was created
	// Pods are the canary pods' health on the current canary nodes;
	// Expected how many canary nodes there are.
	Pods     []Health
	Expected int
	// Past is the restart history of canary nodes that are canary nodes no
	// more (the node left, or stopped matching): their restarts count, their
	// readiness does not.
	Past []Health
	// NoEligibleNode: the ExtendedDaemonSet has nodes, but none admits the
	// canary's template (a nodeSelector typo, a dropped toleration).
	NoEligibleNode bool
	// CannotStartSince is when a canary pod was first seen unable to start (zero if none is).
	CannotStartSince time.Time
	// CreatingSince is the creation of the oldest canary pod still in
	// ContainerCreating (zero if none is).
	CreatingSince time.Time
	// RestartingSince is when canary restarts were first seen (zero if none).
	RestartingSince time.Time
	// Annotations set on the ExtendedDaemonSet for this canary.
	Validated, ManuallyFailed, ManuallyPaused, ManuallyUnpaused bool
	PausedReason                                                string
}

// Verdict is the canary's next step, why, and when to look again.
type Verdict struct {
	Action Action
	Reason string
	// RecheckAfter is when the verdict may change by time alone (0: only on change).
	RecheckAfter time.Duration
}
