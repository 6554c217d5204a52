package plan

import (
	"crypto/sha256"
	"encoding/binary"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// Node is what the slot decisions need to know of a node: its metadata only,
// so that the agent holding the fleet view can list nodes cheaply.
type Node struct {
	Name    string
	UID     string
	Labels  map[string]string
	Version string // the release (rootfs version) the node runs; "" when no agent reported it
	// CordonedBy is who cordoned the node (the drain package's annotation; "" = not slipway).
	CordonedBy string
	// Prestaged is the release its agent reports staged ahead of its slot,
	// PrestageFailed the release it gave up staging ("" for none).
	Prestaged, PrestageFailed string
	// StagingDone: its agent gave its staging permit back since the node
	// list was read (the next list shows what it reported).
	StagingDone bool
}

// Retry is the backoff policy for nodes whose upgrade failed.
type Retry struct {
	Base time.Duration // wait after the first failure
	Max  time.Duration // the wait never grows past this
}

// DefaultRetry waits a minute after the first failure, doubling up to an hour.
var DefaultRetry = Retry{Base: time.Minute, Max: time.Hour}

// Backoff is how long a node that failed attempts times waits before its next try.
func (r Retry) Backoff(attempts int) time.Duration {
	if attempts < 1 {
		return 0
	}
	d := r.Base
	for i := 1; i < attempts && d < r.Max; i++ {
		d *= 2
	}
	return min(d, r.Max)
}

// Target is the version the channel's nodes should run: spec.version, or the
// latest version polled when following latest. "" means not known yet.
func Target(s Settings, st v1.UpdateChannelStatus) string {
	if s.Version != "" {
		return s.Version
	}
	return st.LatestVersion
}

// Following reports whether the channel follows its newest release (polls).
func Following(s Settings) bool { return s.Version == "" }

// PollDue reports whether the channel must be polled now.
func PollDue(s Settings, st v1.UpdateChannelStatus, now time.Time) bool {
	if !Following(s) {
		return false
	}
	return st.LastPolled == nil || !now.Before(st.LastPolled.Add(s.PollInterval))
}

// NextPoll is when the next poll is due (zero when polling is not needed).
func NextPoll(s Settings, st v1.UpdateChannelStatus, now time.Time) time.Time {
	if !Following(s) {
		return time.Time{}
	}
	if st.LastPolled == nil {
		return now
	}
	return st.LastPolled.Add(s.PollInterval)
}

// Degraded reports whether failures at the target reach maxFailures, which
// stops new nodes from starting.
func Degraded(s Settings, st v1.UpdateChannelStatus, target string) bool {
	return failuresAt(st, target) >= s.MaxFailures
}

// failuresAt counts the failures at target, except those of skipped nodes
// (a node powered off or cordoned by an admin does not hold the rollout up).
func failuresAt(st v1.UpdateChannelStatus, target string) int {
	n := 0
	skipped := skippedSet(st)
	for _, f := range st.Failed {
		if f.Version == target && !skipped[f.Node] {
			n++
		}
	}
	return n
}

// FindSlot returns the index of node's slot in st.Updating (exact name
// match), or -1.
func FindSlot(st v1.UpdateChannelStatus, node string) int {
	for i, s := range st.Updating {
		if s.Node == node {
			return i
		}
	}
	return -1
}

// FindFailure returns the index of node's entry in st.Failed (exact name match), or -1.
func FindFailure(st v1.UpdateChannelStatus, node string) int {
	for i, f := range st.Failed {
		if f.Node == node {
			return i
		}
	}
	return -1
}

// Candidates returns, in slot order, the nodes that may take a slot now:
// selected, running another version than target, not already in a slot,
// and (if they failed) past their backoff. Nothing starts while the channel
// is paused, outside its window, or has no target; only retries of nodes
// already failed start while it is Degraded.
func Candidates(s Settings, st v1.UpdateChannelStatus, nodes []Node, target string, retry Retry, now time.Time) []Node {
	if ok, _ := MayStart(s, now); target == "" || s.Paused || !ok { // room in the window for drain and reboot (gate.go)
		return nil
	}
	degraded := Degraded(s, st, target)
	var out []Node
	for _, n := range nodes {
		if n.Version == "" || n.Version == target || !s.Selector.Matches(labels.Set(n.Labels)) {
			continue
		}
		if FindSlot(st, n.Name) >= 0 {
			continue
		}
		if i := FindFailure(st, n.Name); i >= 0 && st.Failed[i].Version == target {
			f := st.Failed[i]
			if now.Before(f.At.Add(retry.Backoff(f.Attempts))) {
				continue
			}
		} else if degraded {
			continue
		}
		out = append(out, n)
	}
	Order(out, target)
	return out
}

// Order sorts nodes by a stable hash of their UID and the target version,
// so every agent computes the same order and a version's order differs from
// the last one's.
func Order(nodes []Node, target string) {
	key := func(n Node) uint64 {
		sum := sha256.Sum256([]byte(n.UID + "\x00" + target))
		return binary.BigEndian.Uint64(sum[:8])
	}
	sort.SliceStable(nodes, func(i, j int) bool {
		ki, kj := key(nodes[i]), key(nodes[j])
		if ki != kj {
			return ki < kj
		}
		return nodes[i].Name < nodes[j].Name
	})
}

// FreeSlots is how many more nodes may start: concurrency minus the slots held.
func FreeSlots(s Settings, st v1.UpdateChannelStatus) int {
	return max(0, s.Concurrency-len(st.Updating))
}

// Claim adds slots for the first candidates that fit, never exceeding
// concurrency, and returns the names it added. Each slot's attempt follows
// the node's failed attempts at target.
func Claim(s Settings, st *v1.UpdateChannelStatus, candidates []Node, target string, now time.Time) []string {
	return ClaimBeside(s, st, candidates, target, now, nil)
}

// ClaimBeside is Claim beside down, the nodes of the channel that hold no
// slot and are unavailable (budget.go): they spend concurrency as slots
// do. One of them that takes a slot (a node left cordoned by slipway)
// moves from down to its slot and spends nothing more.
func ClaimBeside(s Settings, st *v1.UpdateChannelStatus, candidates []Node, target string, now time.Time, down []string) []string {
	var added []string
	left := map[string]bool{}
	for _, d := range down {
		left[d] = true
	}
	for _, n := range candidates {
		if FindSlot(*st, n.Name) >= 0 {
			continue
		}
		others := len(left)
		if left[n.Name] {
			others--
		}
		if FreeSlotsBeside(s, *st, others) == 0 {
			continue // a down node further on may still take one
		}
		delete(left, n.Name)
		attempt := 1
		if i := FindFailure(*st, n.Name); i >= 0 && st.Failed[i].Version == target {
			attempt = st.Failed[i].Attempts + 1
		}
		st.Updating = append(st.Updating, v1.Slot{
			Node: n.Name, Version: target, Attempt: attempt, Phase: PhasePending, Since: metav1.NewTime(now), From: n.Version,
		})
		added = append(added, n.Name)
	}
	return added
}

// SpaceClaims moves the claim time of each slot just added (added) past
// the node's previous claim (earlier, by node) when they fall in the same
// second. Claim times travel at a second's precision (metav1.Time), and a
// slot's identity (SameSlot) and its Job's name rest on them: two slots of
// one node at one version and attempt (a rollout there and back again, a
// slot given back and granted again, within one second) must not share one,
// or the second would take the first's Complete Job for its own.
func SpaceClaims(st *v1.UpdateChannelStatus, added []string, earlier map[string]time.Time) {
	for _, n := range added {
		i := FindSlot(*st, n)
		if i < 0 {
			continue
		}
		since := st.Updating[i].Since.Time.Truncate(time.Second)
		if prev, ok := earlier[n]; ok && !since.After(prev) {
			since = prev.Truncate(time.Second).Add(time.Second)
		}
		st.Updating[i].Since = metav1.NewTime(since)
	}
}

// Release removes node's slot (exact match) and reports whether it held one.
func Release(st *v1.UpdateChannelStatus, node string) bool {
	i := FindSlot(*st, node)
	if i < 0 {
		return false
	}
	st.Updating = append(st.Updating[:i:i], st.Updating[i+1:]...)
	return true
}

// Fail frees node's slot and records the failure with reason, counting the
// attempt. It returns the failure entry written.
func Fail(st *v1.UpdateChannelStatus, node, version, reason string, now time.Time) v1.Failure {
	attempts := 1
	if i := FindSlot(*st, node); i >= 0 && st.Updating[i].Attempt > 0 {
		attempts = st.Updating[i].Attempt
	}
	Release(st, node)
	f := v1.Failure{Node: node, Version: version, Reason: reason, At: metav1.NewTime(now), Attempts: attempts}
	if i := FindFailure(*st, node); i >= 0 {
		if st.Failed[i].Version == version {
			f.Attempts = max(f.Attempts, st.Failed[i].Attempts+1)
		}
		st.Failed[i] = f
		return f
	}
	st.Failed = append(st.Failed, f)
	return f
}

// Succeed frees node's slot and forgets its failures.
func Succeed(st *v1.UpdateChannelStatus, node string) {
	Release(st, node)
	if i := FindFailure(*st, node); i >= 0 {
		st.Failed = append(st.Failed[:i:i], st.Failed[i+1:]...)
	}
}
