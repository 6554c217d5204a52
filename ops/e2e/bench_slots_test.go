package e2e

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"slipway.dev/slipway/ops/e2e/benchside"
	"slipway.dev/slipway/ops/testenv"
)

// slotTable is the benchmark's timeline per slot, from the audit log: one
// row per node in the order its slot's Job was created, each step (steps)
// in seconds since the rollout's start, then when the next slot's Job was
// created after this slot was freed (by whichever node took it) and the
// cycle's parts that the medians hide: pod done -> Job Complete (the Job
// controller's batching) and slot freed -> next Job (the handover); last,
// when each of the concurrency places ended (benchside.Places).
func slotTable(events []testenv.AuditEvent, nodes []string, start time.Time, concurrency int) []string {
	type row struct {
		node string
		at   []time.Time
	}
	var rows []row
	var jobs []time.Time
	for _, n := range nodes {
		at := nodeSteps(events, n)
		if at[0].IsZero() {
			continue
		}
		rows = append(rows, row{n, at})
		jobs = append(jobs, at[0])
	}
	slices.SortFunc(rows, func(a, b row) int { return a.at[0].Compare(b.at[0]) })
	slices.SortFunc(jobs, time.Time.Compare)
	secs := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%.2f", t.Sub(start).Seconds())
	}
	out := []string{"timeline per slot, seconds since the rollout's start: node | " + strings.Join(steps, " | ") +
		" | next Job | pod done -> Job complete | slot freed -> next Job"}
	for _, r := range rows {
		cols := []string{r.node}
		for _, t := range r.at {
			cols = append(cols, secs(t))
		}
		var next time.Time
		freed := r.at[len(r.at)-1]
		if i, _ := slices.BinarySearchFunc(jobs, freed, time.Time.Compare); !freed.IsZero() && i < len(jobs) {
			next = jobs[i]
		}
		cols = append(cols, secs(next), gap(r.at[1], r.at[2]), gap(freed, next))
		out = append(out, "  "+strings.Join(cols, " | "))
	}
	var slots []benchside.Slot
	for _, r := range rows {
		if freed := r.at[len(r.at)-1]; !freed.IsZero() {
			slots = append(slots, benchside.Slot{Start: r.at[0].Sub(start), End: freed.Sub(start)})
		}
	}
	return append(out, benchside.PlacesSummary(benchside.Places(slots, concurrency)))
}

// gap is to - from in seconds, "-" when either is unknown.
func gap(from, to time.Time) string {
	if from.IsZero() || to.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%.2f", to.Sub(from).Seconds())
}
