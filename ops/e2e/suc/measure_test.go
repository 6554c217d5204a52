package suc

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"slipway.dev/slipway/ops/e2e/benchside"
	"slipway.dev/slipway/ops/testenv"
)

// Who wrote, from the apiserver's audit log, in the keys of the result
// line. SUC's count (the goal's) is its own writes and its Jobs' (the Job
// controller, the scheduler, the kubelet's pod status, the kubectl of its
// cordon container); its leader-election Lease renewals come with time,
// rollout or not, and are shown apart, as are what node reboots cost.
const (
	writerSUC    = "suc"
	writerLeader = "suc_leader_lease"
	writerJobs   = "jobs"
	writerNode   = "node"
	writerOther  = "other"
)

var writerNames = map[string]string{
	writerSUC:    "system-upgrade-controller",
	writerLeader: "its leader-election Lease (renewed with time, rollout or not)",
	writerJobs:   "its Jobs (job controller, scheduler, kubelet pod status, kubectl cordon)",
	writerNode:   "node reboots (kubelet node status, heartbeats, node controller)",
	writerOther:  "other",
}

func writerOf(ev testenv.AuditEvent) string {
	ua := ev.UserAgent
	switch {
	case strings.HasPrefix(ua, sucName+"/") && ev.Resource == "leases":
		return writerLeader
	case strings.HasPrefix(ua, sucName+"/"):
		return writerSUC
	case strings.HasPrefix(ua, "kube-controller-manager/") && (strings.HasSuffix(ua, "/job-controller") || strings.HasSuffix(ua, "/ttl-after-finished-controller")),
		strings.HasPrefix(ua, "slipway-testenv/executor"), strings.HasPrefix(ua, "kube-scheduler/"), strings.HasPrefix(ua, "kubectl/"):
		return writerJobs
	case strings.HasPrefix(ua, "kwok/"), strings.HasPrefix(ua, "slipway-testenv/supervisor"),
		strings.HasPrefix(ua, "kube-controller-manager/") && strings.HasSuffix(ua, "/node-controller"):
		return writerNode
	}
	return writerOther
}

// writeCount is the successful writes in a window, by writer and kind.
type writeCount struct {
	refused int
	by      map[string]int
	kinds   map[string]map[string]int // writer -> "verb resource" -> count
}

func countWrites(events []testenv.AuditEvent, from, to time.Time) writeCount {
	w := writeCount{by: map[string]int{}, kinds: map[string]map[string]int{}}
	for _, ev := range events {
		if ev.Time.Before(from) || ev.Time.After(to) {
			continue
		}
		if ev.Code >= 300 {
			w.refused++
			continue
		}
		k := writerOf(ev)
		w.by[k]++
		if w.kinds[k] == nil {
			w.kinds[k] = map[string]int{}
		}
		w.kinds[k][ev.Verb+" "+ev.Resource]++
	}
	return w
}

func (w writeCount) perNode(nodes int) map[string]float64 {
	out := map[string]float64{}
	for k := range writerNames {
		out[k] = float64(w.by[k]) / float64(nodes)
	}
	return out
}

func (w writeCount) lines(nodes int) []string {
	per := func(n int) float64 { return float64(n) / float64(nodes) }
	out := []string{fmt.Sprintf("SUC and its Jobs (the goal's count): %.1f writes per node; %.2f refused", per(w.by[writerSUC]+w.by[writerJobs]), per(w.refused))}
	for _, k := range []string{writerSUC, writerJobs, writerLeader, writerNode, writerOther} {
		var parts []string
		for kind, n := range w.kinds[k] {
			parts = append(parts, fmt.Sprintf("%s %.2f", kind, per(n)))
		}
		slices.Sort(parts)
		out = append(out, fmt.Sprintf("  %s: %.1f per node (%s)", writerNames[k], per(w.by[k]), strings.Join(parts, ", ")))
	}
	return out
}

// slotSteps are the moments of one node's slot in SUC's last plan, from
// the audit log: its Job created, the pod's last status (done), the Job's
// last status (Complete), the cordon, the node back up after a reboot, and
// SUC's node update (label and uncordon) that frees the slot.
var slotSteps = []string{"job created", "pod done", "job complete", "cordoned", "back up", "slot freed"}

// slots is each node's time of every step of slotSteps in its last plan,
// and the creation times of that plan's Jobs, sorted.
type slots struct {
	at   map[string][]time.Time
	jobs []time.Time
}

func slotsOf(events []testenv.AuditEvent, from, to time.Time) slots {
	at := map[string][]time.Time{}
	byPlan := map[string][]time.Time{}
	last := ""
	for _, ev := range events {
		if ev.Time.Before(from) || ev.Time.After(to) || ev.Code >= 300 {
			continue
		}
		node, step := slotStep(ev)
		switch {
		case step < 0:
			continue
		case step == 0: // a Job (of a later plan: start over)
			last, _, _ = strings.Cut(ev.Name, "-on-")
			byPlan[last] = append(byPlan[last], ev.Time)
			at[node] = make([]time.Time, len(slotSteps))
		case at[node] == nil:
			continue
		}
		at[node][step] = ev.Time
	}
	jobs := byPlan[last]
	slices.SortFunc(jobs, time.Time.Compare)
	return slots{at, jobs}
}

// next is when the last plan's first Job was created after t (zero if none).
func (s slots) next(t time.Time) time.Time {
	if i, _ := slices.BinarySearchFunc(s.jobs, t, time.Time.Compare); !t.IsZero() && i < len(s.jobs) {
		return s.jobs[i]
	}
	return time.Time{}
}

// timelineLine reports each step's median time since the node's Job was
// created, over the nodes of the last plan, and the median handover from a
// freed slot to the next Job created.
func timelineLine(events []testenv.AuditEvent, from, to time.Time) string {
	s := slotsOf(events, from, to)
	gaps := make([][]time.Duration, len(slotSteps))
	var hand []time.Duration
	for _, t := range s.at {
		for i := 1; i < len(t); i++ {
			if !t[i].IsZero() {
				gaps[i] = append(gaps[i], t[i].Sub(t[0]))
			}
		}
		if n := s.next(t[len(t)-1]); !n.IsZero() {
			hand = append(hand, n.Sub(t[len(t)-1]))
		}
	}
	var parts []string
	for i := 1; i < len(slotSteps); i++ {
		if len(gaps[i]) > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", slotSteps[i], benchside.Median(gaps[i]).Round(10*time.Millisecond)))
		}
	}
	next := "none (one wave)"
	if len(hand) > 0 {
		next = benchside.Median(hand).Round(10 * time.Millisecond).String()
	}
	return fmt.Sprintf("median per node, since its Job was created: %s; slot freed -> next Job created %s", strings.Join(parts, ", "), next)
}

// slotTable is the timeline per slot of the last plan: one row per node in
// the order its Job was created, each step in seconds since from, the next
// Job created after the slot was freed, and the gaps pod done -> Job
// complete and slot freed -> next Job.
func slotTable(events []testenv.AuditEvent, from, to time.Time) []string {
	s := slotsOf(events, from, to)
	nodes := make([]string, 0, len(s.at))
	for n := range s.at {
		nodes = append(nodes, n)
	}
	slices.SortFunc(nodes, func(a, b string) int { return s.at[a][0].Compare(s.at[b][0]) })
	secs := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%.2f", t.Sub(from).Seconds())
	}
	gap := func(a, b time.Time) string {
		if a.IsZero() || b.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%.2f", b.Sub(a).Seconds())
	}
	out := []string{"timeline per slot, seconds since the plans were created: node | " + strings.Join(slotSteps, " | ") +
		" | next Job | pod done -> Job complete | slot freed -> next Job"}
	for _, n := range nodes {
		t := s.at[n]
		cols := []string{n}
		for _, v := range t {
			cols = append(cols, secs(v))
		}
		next := s.next(t[len(t)-1])
		cols = append(cols, secs(next), gap(t[1], t[2]), gap(t[len(t)-1], next))
		out = append(out, "  "+strings.Join(cols, " | "))
	}
	return out
}

// slotStep maps an audited write to (node, index in slotSteps), or -1.
// SUC names a Job apply-<plan>-on-<node>-with-<hash>, its pod <job>-<suffix>.
func slotStep(ev testenv.AuditEvent) (string, int) {
	nodeOf := func(name string) string {
		_, rest, ok := strings.Cut(name, "-on-")
		if !ok {
			return ""
		}
		node, _, _ := strings.Cut(rest, "-with-")
		return node
	}
	ua := ev.UserAgent
	switch {
	case ev.Resource == "jobs" && ev.Verb == "create" && strings.HasPrefix(ua, sucName+"/"):
		return nodeOf(ev.Name), 0
	case ev.Resource == "pods/status" && strings.HasPrefix(ua, "slipway-testenv/executor") && strings.HasPrefix(ev.Name, "apply-"):
		return nodeOf(ev.Name), 1
	case ev.Resource == "jobs/status" && strings.HasSuffix(ua, "/job-controller") && strings.HasPrefix(ev.Name, "apply-"):
		return nodeOf(ev.Name), 2
	case ev.Resource == "nodes" && strings.HasPrefix(ua, "kubectl/"):
		return ev.Name, 3
	case ev.Resource == "nodes/status" && strings.HasPrefix(ua, "slipway-testenv/supervisor"):
		return ev.Name, 4
	case ev.Resource == "nodes" && strings.HasPrefix(ua, sucName+"/"):
		return ev.Name, 5
	}
	return "", -1
}
