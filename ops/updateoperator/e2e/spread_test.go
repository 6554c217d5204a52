package e2e

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"slipway.dev/slipway/ops/testenv"
)

// spread says where a round's wall time went beyond one node's update: the
// first and last write of the operator (controller or agent) to each node,
// as the earliest start, the median and latest finish, and the node that
// finished last.
func spread(events []testenv.AuditEvent, start time.Time, wall time.Duration) (summary, slowest string, median time.Duration) {
	first, last := map[string]time.Duration{}, map[string]time.Duration{}
	for _, ev := range events {
		w := writer(ev.UserAgent)
		if !strings.HasPrefix(ev.Resource, "nodes") || (w != "controller" && w != "agent") || ev.Time.Before(start) || ev.Time.After(start.Add(wall)) {
			continue
		}
		at := ev.Time.Sub(start)
		if f, ok := first[ev.Name]; !ok || at < f {
			first[ev.Name] = at
		}
		last[ev.Name] = max(last[ev.Name], at)
	}
	if len(last) == 0 {
		return "no operator write seen", "", 0
	}
	names := make([]string, 0, len(last))
	for n := range last {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return last[names[i]] < last[names[j]] })
	var starts, spans []time.Duration
	for _, n := range names {
		starts = append(starts, first[n])
		spans = append(spans, last[n]-first[n])
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
	sort.Slice(spans, func(i, j int) bool { return spans[i] < spans[j] })
	s := func(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }
	slowest = names[len(names)-1]
	return fmt.Sprintf("first node started at %s, last at %s; one node's update (first to last write) median %s, max %s; finishes: first %s, median %s, last %s (%s)",
		s(starts[0]), s(starts[len(starts)-1]), s(spans[len(spans)/2]), s(spans[len(spans)-1]),
		s(last[names[0]]), s(last[names[len(names)/2]]), s(last[slowest]), slowest), slowest, spans[len(spans)/2]
}

// ownOverhead is the operator's own time per node (median): one node's
// update span (its first to last operator write) minus the prepare's
// fixed time and minus the simulated reboot as the simulator took it, from
// the agent's last write before the supervisor's first (rebooting) to the
// supervisor's last write to the node (its new boot ID: the agent starts
// right after). What is left is the operator's turns, round trips and
// process start, plus the host commands' own start (a shell each). sim is
// the simulated reboot's median.
func ownOverhead(events []testenv.AuditEvent, start time.Time, wall, prepare time.Duration) (own, sim time.Duration) {
	type node struct {
		first, last, agentBefore, supFirst, supLast time.Duration
		seen, sup                                   bool
	}
	events = append([]testenv.AuditEvent(nil), events...)
	sort.SliceStable(events, func(i, j int) bool { return events[i].Time.Before(events[j].Time) })
	by := map[string]*node{}
	for _, ev := range events {
		if !strings.HasPrefix(ev.Resource, "nodes") || ev.Time.Before(start) || ev.Time.After(start.Add(wall)) {
			continue
		}
		at, w := ev.Time.Sub(start), writer(ev.UserAgent)
		n := by[ev.Name]
		if n == nil {
			n = &node{}
			by[ev.Name] = n
		}
		switch {
		case w == "controller" || w == "agent":
			if !n.seen || at < n.first {
				n.first = at
			}
			n.seen, n.last = true, max(n.last, at)
			if w == "agent" && !n.sup {
				n.agentBefore = max(n.agentBefore, at)
			}
		case strings.HasPrefix(w, "supervisor"):
			if !n.sup {
				n.supFirst = at
			}
			n.sup, n.supLast = true, max(n.supLast, at)
		}
	}
	var owns, sims []time.Duration
	for _, n := range by {
		if !n.seen || !n.sup {
			continue
		}
		s := n.supLast - n.agentBefore
		sims = append(sims, s)
		owns = append(owns, n.last-n.first-prepare-s)
	}
	if len(owns) == 0 {
		return 0, 0
	}
	sort.Slice(owns, func(i, j int) bool { return owns[i] < owns[j] })
	sort.Slice(sims, func(i, j int) bool { return sims[i] < sims[j] })
	return owns[len(owns)/2], sims[len(sims)/2]
}
