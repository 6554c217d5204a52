package lease

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestTenureOnMonotonicClock: the tenure's end keeps the monotonic clock
// reading of the renewal's time.Now(), so every comparison with the current
// time (Until against time.Now(), time.Until, Fence's deadline) counts real
// elapsed time. Go compares two times on the wall clock as soon as one lacks
// a monotonic reading (a time made from UnixNano, or stripped by Round(0)):
// a tenure kept as wall nanoseconds was extended by a backward NTP step of
// the host's clock. Stepping the host's clock is not possible in a test, so
// the test checks what makes the step harmless: the monotonic reading is
// there, and the comparisons made with it ignore the wall clock.
func TestTenureOnMonotonicClock(t *testing.T) {
	var ten Tenure
	at := time.Now()
	ten.renewed(at, 10*time.Second)
	until := ten.Until()
	if !strings.Contains(until.String(), " m=") {
		t.Fatalf("the tenure's end %v has no monotonic clock reading: it is compared on the wall clock, which a backward step extends", until)
	}
	if got := until.Sub(at); got != 10*time.Second {
		t.Errorf("tenure %v long, want 10s", got)
	}
	if d := time.Until(until); d > 10*time.Second || d < 9*time.Second {
		t.Errorf("time.Until(Until()) = %v, want just under 10s", d)
	}
	ctx, cancel := ten.Fence(context.Background())
	defer cancel()
	if dl, ok := ctx.Deadline(); !ok || !strings.Contains(dl.String(), " m=") {
		t.Errorf("Fence's deadline %v (set %v) is not on the monotonic clock", dl, ok)
	}
	ten.lost()
	if !ten.Until().IsZero() {
		t.Errorf("a lost tenure ends at %v, want the zero time", ten.Until())
	}
	ctx2, cancel2 := ten.Fence(context.Background())
	defer cancel2()
	if ctx2.Err() == nil {
		t.Error("Fence without a tenure is not done")
	}
}
