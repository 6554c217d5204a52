package controller

import (
	"slices"
	"testing"
)

// TestViewQueueSlotHoldersFirst: through client-go's workqueue as the
// controller builds it, the nodes holding a slot are popped before the
// nodes queued earlier that hold none, also when a node queued as one of
// those takes a slot before its turn.
func TestViewQueueSlotHoldersFirst(t *testing.T) {
	var holders slotHolderSet
	q := newViewQueue(holders.holds)
	defer q.ShutDown()
	for _, n := range []string{"permit-1", "permit-2", "target-1", "later-slot"} {
		q.Add(n)
	}
	holders.set("uid-a", []string{"slot-a", "later-slot"})
	holders.set("uid-b", []string{"slot-b"})
	q.Add("slot-a")
	q.Add("permit-3")
	q.Add("slot-b")
	q.Add("later-slot") // queued already, as a node without a slot: it moves up
	var got []string
	for q.Len() > 0 {
		n, _ := q.Get()
		got = append(got, n)
		q.Done(n)
	}
	want := []string{"slot-a", "slot-b", "later-slot", "permit-1", "permit-2", "target-1", "permit-3"}
	if !slices.Equal(got, want) {
		t.Errorf("popped %v, want %v", got, want)
	}
	holders.drop("uid-a")
	if holders.holds("slot-a") || !holders.holds("slot-b") {
		t.Error("a dropped channel's slot holders still count, or another channel's stopped counting")
	}
}
