package plan

import (
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// Pod is one pod of an ExtendedDaemonSet (or of the DaemonSet it replaces) on a node.
type Pod struct {
	Name        string
	Available   bool
	Terminating bool
	// Unresponsive: the pod has stayed unscheduled too long, or stays
	// Terminating past its grace period (a dead node's kubelet never
	// confirms it; DataDog's rule): its node counts towards
	// maxPodSchedulerFailure instead of maxUnavailable.
	Unresponsive bool
}

// NodeState is one eligible node: its pod of the template it should run
// (Current, nil if none) and its other pods (older templates, the old DaemonSet).
type NodeState struct {
	Node    string
	Current *Pod
	Old     []Pod
	// Leave: the node no longer admits the active template; its pods go
	// under the same budget as outdated ones, and none is created there.
	Leave bool
	// Template is the ERS the node's pod should be of: the creation
	// budget is per template, so pods of the active template failing
	// since before do not hold a canary's (or a new template's) creations.
	Template string
}

// Limits bound one step of a rollout.
type Limits struct {
	MaxUnavailable         int
	MaxPodSchedulerFailure int
	// MaxCreation is the most pods of one template not yet available at
	// once (maxParallelPodCreation under slow start).
	MaxCreation int
	// Paused stops deletions of outdated pods; Frozen stops creations too.
	Paused, Frozen bool
}

// Plan is one step of a rollout.
type Plan struct {
	// Create lists the nodes that get a pod of their template now.
	Create []string
	// Delete lists the pods to delete now.
	Delete []string
	// Unavailable counts the nodes without an available pod; Ignored those
	// of them that maxPodSchedulerFailure lets go uncounted.
	Unavailable, Ignored int
}

// Rollout plans one step: nodes with no pod get one, as many as the
// creation budget allows; outdated pods go, unavailable ones first (their
// deletion costs nothing), then available ones while fewer than
// maxUnavailable nodes are without an available pod. A node's next pod is
// created only once its outdated pods are gone, so a node never runs two.
func Rollout(nodes []NodeState, l Limits) Plan {
	sorted := append([]NodeState{}, nodes...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Node < sorted[j].Node })
	var p Plan
	unresponsive, inFlight := 0, map[string]int{}
	var needPod []NodeState
	var freeOld, availableOld []string
	for _, n := range sorted {
		if !nodeAvailable(n) {
			p.Unavailable++
			if nodeUnresponsive(n) {
				unresponsive++
			}
		}
		if n.Current != nil && !n.Current.Available && !n.Current.Terminating && !n.Current.Unresponsive {
			inFlight[n.Template]++
		}
		live := liveOld(n.Old)
		switch {
		case n.Current == nil && len(n.Old) == 0 && !n.Leave:
			needPod = append(needPod, n)
		case n.Current != nil && n.Current.Available:
			freeOld = append(freeOld, podNames(live, func(Pod) bool { return true })...)
		default:
			freeOld = append(freeOld, podNames(live, func(o Pod) bool { return !o.Available })...)
			if n.Current == nil {
				availableOld = append(availableOld, podNames(live, func(o Pod) bool { return o.Available })...)
			}
		}
	}
	p.Ignored = min(unresponsive, l.MaxPodSchedulerFailure)
	if l.Frozen {
		return p
	}
	for _, n := range needPod { // in node order, each template within its own budget
		if inFlight[n.Template] < l.MaxCreation {
			inFlight[n.Template]++
			p.Create = append(p.Create, n.Node)
		}
	}
	if l.Paused {
		return p
	}
	p.Delete = freeOld
	if budget := l.MaxUnavailable - (p.Unavailable - p.Ignored); budget > 0 {
		p.Delete = append(p.Delete, availableOld[:min(budget, len(availableOld))]...)
	}
	return p
}

func nodeAvailable(n NodeState) bool {
	if n.Current != nil && n.Current.Available && !n.Current.Terminating {
		return true
	}
	for _, o := range n.Old {
		if o.Available && !o.Terminating {
			return true
		}
	}
	return false
}

func nodeUnresponsive(n NodeState) bool {
	if n.Current != nil && n.Current.Unresponsive {
		return true
	}
	for _, o := range n.Old {
		if o.Unresponsive {
			return true
		}
	}
	return false
}

func liveOld(pods []Pod) []Pod {
	var out []Pod
	for _, p := range pods {
		if !p.Terminating {
			out = append(out, p)
		}
	}
	return out
}

func podNames(pods []Pod, keep func(Pod) bool) []string {
	var out []string
	for _, p := range pods {
		if keep(p) {
			out = append(out, p.Name)
		}
	}
	return out
}

// Scaled resolves a count or percentage of total (rounded up), or def when v is nil.
func Scaled(v *intstr.IntOrString, total, def int) (int, error) {
	if v == nil {
		return def, nil
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, total, true)
	if err != nil {
		return 0, fmt.Errorf("%q is neither a count nor a percentage: %w", v.String(), err)
	}
	if n < 0 {
		return 0, fmt.Errorf("%q is negative", v.String())
	}
	return n, nil
}

// SlowStart is the creation budget elapsed after a template's start: it
// begins at increase and grows by increase every interval, up to maxParallel.
func SlowStart(maxParallel, increase int, interval, elapsed time.Duration) int {
	if increase <= 0 {
		increase = 1
	}
	slots := 1
	if interval > 0 && elapsed > 0 {
		slots += int(elapsed / interval)
	}
	if slots > maxParallel/increase+1 { // avoid overflow on long-lived templates
		return maxParallel
	}
	return min(maxParallel, slots*increase)
}

// FailedPodBackoff is how long a node waits before its next pod after
// failures pods failed there in a row: 1 s, doubled each time, at most 5 min.
func FailedPodBackoff(failures int) time.Duration {
	if failures <= 0 {
		return 0
	}
	d := time.Second
	for i := 1; i < failures && d < 5*time.Minute; i++ {
		d *= 2
	}
	return min(d, 5*time.Minute)
}
