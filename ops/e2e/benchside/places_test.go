package benchside

import (
	"reflect"
	"testing"
	"time"
)

// TestPlaces threads slots through their places: each later slot takes
// the place freed first, and places come back in the order they ended.
func TestPlaces(t *testing.T) {
	s := func(start, end float64) Slot {
		return Slot{Start: time.Duration(start * float64(time.Second)), End: time.Duration(end * float64(time.Second))}
	}
	for _, c := range []struct {
		name        string
		slots       []Slot
		concurrency int
		want        [][]int
	}{
		{"one place", []Slot{s(0, 1), s(1.1, 2), s(2.1, 3)}, 1, [][]int{{0, 1, 2}}},
		{"two in step", []Slot{s(0, 10), s(0, 10.5), s(10.1, 20), s(10.6, 21)}, 2, [][]int{{0, 2}, {1, 3}}},
		{"the end read after the next start", []Slot{s(0, 10.2), s(0, 12), s(10.1, 20)}, 2, [][]int{{1}, {0, 2}}},
		{"given in any order", []Slot{s(10.6, 21), s(0, 10.5), s(10.1, 20), s(0, 10)}, 2, [][]int{{3, 2}, {1, 0}}},
		{"fewer slots than places", []Slot{s(0, 5)}, 3, [][]int{{0}}},
		{"none", nil, 2, nil},
	} {
		var got [][]int
		for _, p := range Places(c.slots, c.concurrency) {
			got = append(got, p.Slots)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func TestPlacesSummary(t *testing.T) {
	got := PlacesSummary([]Place{{End: 234 * time.Second}, {End: 241500 * time.Millisecond}})
	want := "the 2 places (slots one after another) ended at 234.0, 241.5 s: 7.5 s apart"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
