package benchside

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// A rollout at concurrency c runs c places side by side: each place holds
// one slot at a time, and a slot freed is taken by the next node. The
// wall is the slowest place's, so when the median slot is quick but the
// wall is not, the places tell why: places whose slots start and end
// together (in step) share every burst of writes and pay more per slot
// than a place that drifted apart from them.

// Slot is one node's slot, from its start (its Job or Pod created) to
// its end (the slot freed), each since the rollout's start.
type Slot struct {
	Start, End time.Duration
}

// Place is one concurrency place: its slots' indexes into the Slots
// given to Places, one after another.
type Place struct {
	Slots []int
	End   time.Duration // the last slot's end
}

// Places threads slots through concurrency places: the first concurrency
// slots to start open one place each; every later slot takes the place
// freed first (a slot freed is granted to the next node at once, and an
// end may be read a little after the start it let in). Places come back
// in the order they ended.
func Places(slots []Slot, concurrency int) []Place {
	order := make([]int, len(slots))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(slots[a].Start, slots[b].Start) })
	var places []Place
	for _, i := range order {
		if len(places) < concurrency {
			places = append(places, Place{Slots: []int{i}, End: slots[i].End})
			continue
		}
		p := takenPlace(places)
		places[p].Slots = append(places[p].Slots, i)
		places[p].End = slots[i].End
	}
	slices.SortStableFunc(places, func(a, b Place) int { return cmp.Compare(a.End, b.End) })
	return places
}

// takenPlace is the place that was freed first.
func takenPlace(places []Place) int {
	first := 0
	for k, p := range places {
		if p.End < places[first].End {
			first = k
		}
	}
	return first
}

// PlacesSummary is one line on the places: when each ended, and how far
// apart the first and the last.
func PlacesSummary(places []Place) string {
	if len(places) == 0 {
		return "no places"
	}
	ends := make([]string, len(places))
	for i, p := range places {
		ends[i] = fmt.Sprintf("%.1f", p.End.Seconds())
	}
	spread := places[len(places)-1].End - places[0].End
	return fmt.Sprintf("the %d places (slots one after another) ended at %s s: %.1f s apart", len(places), strings.Join(ends, ", "), spread.Seconds())
}
