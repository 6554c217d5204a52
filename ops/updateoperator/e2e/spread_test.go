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
