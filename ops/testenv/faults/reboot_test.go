package faults

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestRebootArmedOnlyWithAStep: a reboot with a step is a trap (counted
// armed, injected only once it struck); one with no step strikes at its
// offset and is injected at once. Both parse and print back.
func TestRebootArmedOnlyWithAStep(t *testing.T) {
	sched, err := Parse("+0s reboot node/node-1 for 2s\n+0s reboot node/node-2 for 1m0s step current:kernel\n")
	if err != nil {
		t.Fatal(err)
	}
	if sched[0].Armed() || !sched[1].Armed() || !Reboot.Armed() || !PowerCut.Armed() || Kill.Armed() {
		t.Fatalf("armed: %t %t", sched[0].Armed(), sched[1].Armed())
	}
	if got := sched.String(); got != "+0s reboot node/node-1 for 2s\n+0s reboot node/node-2 for 1m0s step current:kernel\n" {
		t.Fatalf("printed %q", got)
	}
	if _, err := Parse("+0s reboot node/node-1"); err == nil {
		t.Fatal("a reboot with no \"for\" parsed")
	}
	for _, strike := range []bool{false, true} {
		inj := &rebootStriker{strike: strike}
		rep := Run(context.Background(), Schedule{
			{At: 0, Kind: Reboot, Target: "node/node-1", For: 10 * time.Millisecond},
			{At: 0, Kind: Reboot, Target: "node/node-2", For: 10 * time.Millisecond, Step: "current:kernel"},
		}, inj, nil)
		want := 1
		if strike {
			want = 2
		}
		if rep.Injected[Reboot] != want || rep.Armed[Reboot] != 1 || len(rep.Strikes) != want {
			t.Errorf("strike %t: injected %v, armed %v, strikes %v; want reboot injected %d, armed 1", strike, rep.Injected, rep.Armed, rep.Strikes, want)
		}
	}
}

// rebootStriker strikes the immediate reboots, and the armed ones when
// strike is set, recording each as Sim does.
type rebootStriker struct {
	strike  bool
	fired   atomic.Int32
	strikes []Strike
}

func (s *rebootStriker) Inject(_ context.Context, f Fault) (func(context.Context) error, error) {
	if !f.Armed() {
		s.strikes = append(s.strikes, Strike{Node: f.Target, At: time.Now(), Back: time.Now()})
		return func(context.Context) error { return nil }, nil
	}
	return func(context.Context) error {
		if s.strike {
			s.fired.Add(1)
			s.strikes = append(s.strikes, Strike{Node: f.Target, At: time.Now(), Back: time.Now()})
		}
		return nil
	}, nil
}

func (s *rebootStriker) Fired() map[Kind]int { return map[Kind]int{Reboot: int(s.fired.Load())} }

func (s *rebootStriker) Strikes() []Strike { return s.strikes }
