package agentmem

import (
	"context"
	"testing"
	"time"
)

// TestKeeperUnmapsWhenIdle: after the first unmapping, a busy spell that
// ends brings another, Quiet later; a later idle report alone does not.
func TestKeeperUnmapsWhenIdle(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan string, 16)
	act := newActivity()
	k := &keeper{act: act, o: Options{Settle: time.Millisecond, Drop: time.Hour, Unmap: 10 * time.Hour,
		Quiet: 10 * time.Millisecond, Gap: time.Millisecond},
		unmap: func() { events <- "unmap" }, drop: func() { events <- "drop" }}
	go k.run(ctx)
	expect(t, events, "unmap", "drop") // the first, after Settle
	act.set(true, time.Now())
	act.set(false, time.Now())
	expect(t, events, "unmap", "drop") // Quiet after the busy spell
	act.set(false, time.Now())
	select {
	case e := <-events:
		t.Errorf("an idle report without a busy spell before it brought %q", e)
	case <-time.After(100 * time.Millisecond):
	}
}

func expect(t *testing.T, events <-chan string, want ...string) {
	t.Helper()
	for _, w := range want {
		select {
		case got := <-events:
			if got != w {
				t.Fatalf("got %q, want %q", got, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no %q", w)
		}
	}
}
