package e2e

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/ops/testenv"
)

// Who wrote, from the apiserver's audit log; writes the apiserver refused
// (409 conflicts) change nothing and are counted apart. The goal of at most 20 writes
// per node counts what slipway writes and what its Jobs cause (the Job
// controller's Job status, pod and Events; the kubelet's pod status), not
// what any reboot of a node costs with or without slipway (the kubelet's
// node status and heartbeats, the node controller's taints). The agents'
// own heartbeat Leases are shown apart too: they are renewed with time,
// rollout or not, so per node upgraded they grow with the rollout's length.
const (
	writerSlipway   = "slipway agents and controller"
	writerHeartbeat = "slipway agents' heartbeat Leases (renewed with time, rollout or not)"
	writerJobs      = "its Jobs (job controller, kubelet pod status)"
	writerNode      = "node reboots (kubelet node status, heartbeats, node controller)"
	writerOther     = "other"
)

// writerOf classifies a write by its client's user agent and resource.
func writerOf(ev testenv.AuditEvent) string {
	ua := ev.UserAgent
	switch {
	case strings.HasPrefix(ua, "slipway-agent/") && ev.Resource == "leases" && strings.HasPrefix(ev.Name, protocol.AgentLeasePrefix):
		return writerHeartbeat
	case strings.HasPrefix(ua, "slipway-agent/"), strings.HasPrefix(ua, "slipway-controller/"):
		return writerSlipway
	case strings.HasPrefix(ua, "kube-controller-manager/") && (strings.HasSuffix(ua, "/job-controller") || strings.HasSuffix(ua, "/ttl-after-finished-controller")):
		return writerJobs
	case strings.HasPrefix(ua, "slipway-testenv/executor"): // the kubelet's part of a pod
		return writerJobs
	case strings.HasPrefix(ua, "kube-scheduler/"):
		return writerJobs
	case strings.HasPrefix(ua, "kwok/"), strings.HasPrefix(ua, "slipway-testenv/supervisor"),
		strings.HasPrefix(ua, "kube-controller-manager/") && strings.HasSuffix(ua, "/node-controller"):
		return writerNode
	}
	return writerOther
}

// writeReport counts the audited writes in [from, to] by writer and, per
// writer, by verb and resource.
type writeReport struct {
	rejected int // refused (409 conflicts and other errors): counted apart, they change nothing
	total    int
	byWriter map[string]int
	byKind   map[string]map[string]int // writer -> "verb resource" -> count
}

func countWrites(events []testenv.AuditEvent, from, to time.Time) writeReport {
	r := writeReport{byWriter: map[string]int{}, byKind: map[string]map[string]int{}}
	for _, ev := range events {
		if ev.Time.Before(from) || ev.Time.After(to) {
			continue
		}
		if ev.Code >= 300 {
			r.rejected++
			continue
		}
		w := writerOf(ev)
		r.total++
		r.byWriter[w]++
		if r.byKind[w] == nil {
			r.byKind[w] = map[string]int{}
		}
		r.byKind[w][ev.Verb+" "+ev.Resource]++
	}
	return r
}

// lines formats the report per node upgraded.
func (r writeReport) lines(nodes int) []string {
	per := func(n int) float64 { return float64(n) / float64(nodes) }
	out := []string{fmt.Sprintf("all writes: %.1f per node (and %.2f refused, conflicts included)", per(r.total), per(r.rejected)),
		fmt.Sprintf("slipway and its Jobs (the goal's count): %.1f per node", per(r.byWriter[writerSlipway]+r.byWriter[writerJobs]))}
	for _, w := range []string{writerSlipway, writerJobs, writerHeartbeat, writerNode, writerOther} {
		type kv struct {
			k string
			n int
		}
		var kinds []kv
		for k, n := range r.byKind[w] {
			kinds = append(kinds, kv{k, n})
		}
		slices.SortFunc(kinds, func(a, b kv) int { return b.n - a.n })
		var parts []string
		for _, e := range kinds {
			parts = append(parts, fmt.Sprintf("%s %.2f", e.k, per(e.n)))
		}
		out = append(out, fmt.Sprintf("  %s: %.1f per node (%s)", w, per(r.byWriter[w]), strings.Join(parts, ", ")))
	}
	return out
}

// step names the moments of one node's upgrade seen in the audit log.
// The slot's work is a Pod the agent creates (a Job before: "job
// complete" is the Job controller's, and unseen for a Pod).
var steps = []string{"job/pod created", "pod done", "job complete", "cordoned", "reboot", "back up", "slot freed"}

// timeline returns, per step, the median time since the node's Job was
// created, over every node, and the median handover: from a slot freed to
// the next Job created.
func timeline(events []testenv.AuditEvent, nodes []string) (medians []time.Duration, handover time.Duration) {
	gaps := make([][]time.Duration, len(steps))
	var frees, jobs []time.Time
	for _, n := range nodes {
		at := nodeSteps(events, n)
		for i := 1; i < len(steps); i++ {
			if !at[i].IsZero() && !at[0].IsZero() {
				gaps[i] = append(gaps[i], at[i].Sub(at[0]))
			}
		}
		if !at[0].IsZero() {
			jobs = append(jobs, at[0])
		}
		if !at[len(steps)-1].IsZero() {
			frees = append(frees, at[len(steps)-1])
		}
	}
	medians = make([]time.Duration, len(steps))
	for i, g := range gaps {
		medians[i] = median(g)
	}
	slices.SortFunc(jobs, time.Time.Compare)
	var hand []time.Duration
	for _, f := range frees {
		if i, _ := slices.BinarySearchFunc(jobs, f, time.Time.Compare); i < len(jobs) {
			hand = append(hand, jobs[i].Sub(f))
		}
	}
	return medians, median(hand)
}

// nodeSteps finds, for node, when each of steps happened (zero if unseen).
func nodeSteps(events []testenv.AuditEvent, node string) []time.Time {
	at := make([]time.Time, len(steps))
	agent := "node/" + node
	jobPrefix := protocol.JobNamePrefix(protocol.JobKindUpgrade, node)
	for _, ev := range events {
		if ev.Code >= 300 {
			continue
		}
		mine := strings.HasSuffix(ev.UserAgent, agent)
		switch {
		case mine && ev.Verb == "create" && (ev.Resource == "pods" || ev.Resource == "jobs") && strings.HasPrefix(ev.Name, jobPrefix) && at[0].IsZero(): // the slot's Pod (or Job), not a staging Job
			at[0] = ev.Time
		case at[0].IsZero():
		case strings.HasPrefix(ev.UserAgent, "slipway-testenv/executor") && ev.Resource == "pods/status" && strings.HasPrefix(ev.Name, jobPrefix):
			at[1] = ev.Time // the last one: the pod's end
		case writerOf(ev) == writerJobs && ev.Resource == "jobs/status" && strings.HasPrefix(ev.Name, jobPrefix):
			at[2] = ev.Time
		case strings.HasPrefix(ev.UserAgent, "slipway-controller/") && ev.Name == node && ev.Resource == "nodes" && at[3].IsZero():
			at[3] = ev.Time // the controller's cordon, once the agent asked for its drain (in its NodeUpdate)
		case strings.HasPrefix(ev.UserAgent, "slipway-testenv/supervisor") && ev.Name == node && ev.Resource == "nodes" && at[4].IsZero():
			at[4] = ev.Time
		case strings.HasPrefix(ev.UserAgent, "slipway-testenv/supervisor") && ev.Name == node && ev.Resource == "nodes/status" && !at[4].IsZero():
			at[5] = ev.Time
		case mine && ev.Resource == "nodes" && !at[5].IsZero() && at[6].IsZero():
			// the uncordon with the report that frees the slot: its first write after the boot
			at[6] = ev.Time
		}
	}
	return at
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[len(d)/2]
}

// timelineLine formats timeline's result.
func timelineLine(medians []time.Duration, handover time.Duration) string {
	var parts []string
	for i := 1; i < len(steps); i++ {
		m := medians[i].Round(10 * time.Millisecond).String()
		if medians[i] == 0 {
			m = "-" // unseen: a slot Pod has no Job to complete
		}
		parts = append(parts, steps[i]+" "+m)
	}
	return fmt.Sprintf("median per node, since its Job or Pod was created: %s; slot freed -> next one created %s",
		strings.Join(parts, ", "), handover.Round(10*time.Millisecond))
}
