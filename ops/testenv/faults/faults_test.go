package faults

import (
	"bufio"
	"context"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func spec() Spec {
	return Spec{Duration: 3 * time.Minute, Targets: map[Kind][]string{
		Kill: {"agent/node-1", "agent/node-2", "controller/a"}, Pause: {"agent/node-1", "controller/a"},
		Latency: {"agent/node-1"}, HalfOpen: {"controller/a"}, Partition: {"agent/node-2"}, Drop: {"agent/node-2"},
		NotReady: {"node/node-1"}, Reregister: {"node/node-2"}, BlockEviction: {"pdb/default/guarded"}, StallReboot: {"node/node-3"},
		PowerCut: {"node/node-4"}, FullDisk: {"node/node-5"}, SlowSource: {"source"}, FailSource: {"source"}, CorruptSource: {"source"},
		ClockStep: {"agent/node-1", "controller/a"}, Reboot: {"node/node-2"}, SlowWrites: {"writes/controller"},
	}, Steps: []string{"staged", "current:k3os", "rollback:current:kernel"}}
}

func TestGenerateIsDeterministic(t *testing.T) {
	a, b := Generate(42, spec()), Generate(42, spec())
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("seed 42 gave two schedules:\n%s\n---\n%s", a, b)
	}
	if len(a) < 20 {
		t.Fatalf("only %d faults in 3m at a 2s mean gap:\n%s", len(a), a)
	}
	if c := Generate(43, spec()); reflect.DeepEqual(a, c) {
		t.Fatal("seeds 42 and 43 gave the same schedule")
	}
	for k, n := range a.Counts() {
		t.Logf("%s: %d", k, n)
	}
	drawn := a.Counts() // seed 42's, with seed 43's: every kind in two 3-minute draws
	for k, n := range Generate(43, spec()).Counts() {
		drawn[k] += n
	}
	if len(drawn) != len(AllKinds) {
		t.Errorf("kinds drawn %v, want all of %v", drawn, AllKinds)
	}
}

func TestGenerateNeverOverlapsOneTarget(t *testing.T) {
	for seed := range int64(50) {
		s := Generate(seed, spec())
		end := map[string]time.Duration{}
		for _, f := range s {
			if end[f.Target] > f.At {
				t.Fatalf("seed %d: %s starts before the last fault on %s ends (%s)", seed, f, f.Target, end[f.Target])
			}
			end[f.Target] = f.At + f.For
			if f.At >= spec().Duration {
				t.Fatalf("seed %d: %s past the run's duration", seed, f)
			}
		}
	}
}

func TestWeightsZeroNeverDrawn(t *testing.T) {
	sp := spec()
	sp.Weights = map[Kind]int{Kill: 3, Pause: 1}
	for _, f := range Generate(7, sp) {
		if f.Kind != Kill && f.Kind != Pause {
			t.Fatalf("%s drawn with weight 0", f)
		}
	}
}

func TestParseRoundTrip(t *testing.T) {
	s := Generate(9, spec())
	got, err := Parse("# seed 9\n\n" + s.String())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Fatalf("round trip changed the schedule:\n%s\n---\n%s", s, got)
	}
	for _, bad := range []string{"12s kill agent/node-1", "+1s explode agent/node-1", "+1s pause agent/node-1", "+1s pause x for soon",
		"+2s kill a\n+1s kill b", "+1s power-cut node/node-1 for 3s", "+1s kill a step",
		"+1s clock-step agent/node-1 for 3s"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q): no error", bad)
		}
	}
}

// TestRunAppliesAndHeals runs a schedule through a recording injector: each
// fault at its offset, each timed fault healed after its For, the standing
// ones healed when the run ends early.
func TestRunAppliesAndHeals(t *testing.T) {
	s := Schedule{
		{At: 50 * time.Millisecond, Kind: Pause, Target: "a", For: 100 * time.Millisecond},
		{At: 60 * time.Millisecond, Kind: Kill, Target: "b"},
		{At: 70 * time.Millisecond, Kind: Kill, Target: "gone"},
		{At: 80 * time.Millisecond, Kind: NotReady, Target: "c", For: time.Hour},
		{At: time.Hour, Kind: Kill, Target: "never"},
	}
	var mu sync.Mutex
	var events []string
	start := time.Now()
	rec := func(what string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, what)
	}
	inj := InjectorFunc(func(_ context.Context, f Fault) (func(context.Context) error, error) {
		if f.Target == "gone" {
			return nil, ErrSkip
		}
		if time.Since(start) < f.At {
			t.Errorf("%s applied early, at %s", f, time.Since(start))
		}
		rec("inject " + f.Target)
		if !f.Kind.Timed() {
			return nil, nil
		}
		return func(context.Context) error { rec("heal " + f.Target); return nil }, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rep := Run(ctx, s, inj, func(l string) { t.Log(l) })
	want := []string{"inject a", "inject b", "inject c", "heal a", "heal c"}
	if !reflect.DeepEqual(events, want) {
		t.Fatalf("events %v, want %v", events, want)
	}
	if rep.Injected[Kill] != 1 || rep.Skipped[Kill] != 1 || rep.Injected[Pause] != 1 || rep.Injected[NotReady] != 1 || len(rep.Errors) != 0 {
		t.Fatalf("report %+v", rep)
	}
	if rep.FaultTime < 100*time.Millisecond {
		t.Fatalf("fault time %s, want at least the pause's 100ms", rep.FaultTime)
	}
}

// echo serves a line-echo server and returns its address.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(l)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip writes a line through c and reads it back within budget.
func roundTrip(c net.Conn, r *bufio.Reader, budget time.Duration) (time.Duration, error) {
	start := time.Now()
	_ = c.SetDeadline(start.Add(budget))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	l, err := r.ReadString('\n')
	if err == nil && strings.TrimSpace(l) != "ping" {
		return 0, &net.AddrError{Err: "echo " + l}
	}
	return time.Since(start), err
}

func TestProxyFaults(t *testing.T) {
	p, err := NewProxy("127.0.0.1:0", echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	c, r := dial()
	if _, err := roundTrip(c, r, 10*time.Second); err != nil {
		t.Fatalf("clean proxy: %v", err)
	}

	p.SetLatency(150 * time.Millisecond)
	if d, err := roundTrip(c, r, 10*time.Second); err != nil || d < 300*time.Millisecond {
		t.Fatalf("latency 150ms each way: round trip %s, %v; want at least 300ms", d, err)
	}
	p.SetLatency(0)

	// Half-open: the connection stays, nothing comes back; healed, the held bytes flow.
	p.SetHalfOpen(true)
	if _, err := roundTrip(c, r, 300*time.Millisecond); err == nil {
		t.Fatal("half-open: an answer came back")
	}
	p.SetHalfOpen(false)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if l, err := r.ReadString('\n'); err != nil || l != "ping\n" {
		t.Fatalf("healed half-open: held line %q, %v", l, err)
	}

	// Partition: the open connection is cut, new ones are refused (closed at once).
	p.SetPartition(true)
	if _, err := roundTrip(c, r, 5*time.Second); err == nil {
		t.Fatal("partition: the open connection still answers")
	}
	c2, r2 := dial()
	if _, err := roundTrip(c2, r2, 5*time.Second); err == nil {
		t.Fatal("partition: a new connection answers")
	}
	p.SetPartition(false)
	c3, r3 := dial()
	if _, err := roundTrip(c3, r3, 10*time.Second); err != nil {
		t.Fatalf("healed partition: %v", err)
	}

	// Drop: open connections end, new ones work.
	p.Drop()
	if _, err := roundTrip(c3, r3, 5*time.Second); err == nil {
		t.Fatal("drop: the connection still answers")
	}
	c4, r4 := dial()
	if _, err := roundTrip(c4, r4, 10*time.Second); err != nil {
		t.Fatalf("after a drop: %v", err)
	}
}
