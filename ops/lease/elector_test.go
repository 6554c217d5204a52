package lease

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.RunMain(m, testenv.Options{}, &env)) }

// The agent's timings (renew deadline 2/3, retry 1/5 of the duration), short.
const (
	testDuration = 2 * time.Second
	testDeadline = testDuration * 2 / 3
	testRetry    = testDuration / 5
)

// candidate is one running Run; dead makes its every request fail, as if
// its process had died without releasing the Lease.
type candidate struct {
	name    string
	leading atomic.Bool
	dead    atomic.Bool
	cancel  context.CancelFunc
	done    chan struct{}
	tenure  Tenure
	started atomic.Int64 // UnixNano of the last OnStartedLeading
}

// flaky is a Client that fails while its candidate is dead.
type flaky struct {
	Client
	c *candidate
}

var errDead = errors.New("candidate is dead")

func (f flaky) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	if f.c.dead.Load() {
		return nil, errDead
	}
	return f.Client.Get(ctx, name, opts)
}

func (f flaky) Update(ctx context.Context, l *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if f.c.dead.Load() {
		return nil, errDead
	}
	return f.Client.Update(ctx, l, opts)
}

func start(t *testing.T, leases Client, lease, name string) *candidate {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &candidate{name: name, cancel: cancel, done: make(chan struct{})}
	cfg := Config{Client: flaky{leases, c}, Name: lease, Identity: name,
		Duration: testDuration, RenewDeadline: testDeadline, RetryPeriod: testRetry,
		Tenure:           &c.tenure,
		OnStartedLeading: func() { c.started.Store(time.Now().UnixNano()); c.leading.Store(true) },
		OnStoppedLeading: func() { c.leading.Store(false) }}
	go func() {
		defer close(c.done)
		if err := Run(ctx, cfg); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}()
	t.Cleanup(c.stop)
	return c
}

func (c *candidate) stop() { c.cancel(); <-c.done }

// watchLeaders fails the test whenever more than one of cs leads at once.
func watchLeaders(t *testing.T, cs ...*candidate) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if l := leaders(cs); len(l) > 1 {
				t.Errorf("%v lead at once", l)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
}

func leaders(cs []*candidate) []string {
	var out []string
	for _, c := range cs {
		if c.leading.Load() {
			out = append(out, c.name)
		}
	}
	return out
}

// waitLeader waits until one of cs leads and returns it and how long that took.
func waitLeader(t *testing.T, within time.Duration, cs ...*candidate) (*candidate, time.Duration) {
	t.Helper()
	start := time.Now()
	for time.Since(start) < within {
		for _, c := range cs {
			if c.leading.Load() {
				return c, time.Since(start)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("none of %d candidates leads after %s", len(cs), within)
	return nil, 0
}

func TestOneLeaderHandsOverOnReleaseAndOnExpiry(t *testing.T) {
	e := testenv.Need(t, env)
	client, err := kube.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	leases := client.CoordinationV1().Leases("default")
	name := fmt.Sprintf("elect-%d", time.Now().UnixNano())
	a, b, c := start(t, leases, name, "a"), start(t, leases, name, "b"), start(t, leases, name, "c")
	watchLeaders(t, a, b, c)

	first, _ := waitLeader(t, 10*testDuration, a, b, c)
	time.Sleep(2 * testDuration) // the others keep waiting while first renews
	if got := leaders([]*candidate{a, b, c}); len(got) != 1 || got[0] != first.name {
		t.Fatalf("leaders after %s = %v, want only %s", 2*testDuration, got, first.name)
	}

	rest := others(first, a, b, c)
	first.stop() // releases the Lease
	second, took := waitLeader(t, 10*testDuration, rest...)
	if took >= testDuration {
		t.Errorf("after a release %s took over in %s, want less than the lease duration %s", second.name, took, testDuration)
	}
	l := get(t, leases, name)
	if *l.Spec.HolderIdentity != second.name || *l.Spec.LeaseTransitions < 1 {
		t.Errorf("lease after the release: holder %q, transitions %d", *l.Spec.HolderIdentity, *l.Spec.LeaseTransitions)
	}

	second.dead.Store(true) // stops renewing and cannot release
	third, took := waitLeader(t, 10*testDuration, others(second, rest...)...)
	if took < testDeadline {
		t.Errorf("%s took an unreleased lease after %s, before it could expire (%s)", third.name, took, testDuration)
	}
	if second.leading.Load() {
		t.Errorf("%s still leads though it could not renew", second.name)
	}
	if h := *get(t, leases, name).Spec.HolderIdentity; h != third.name {
		t.Errorf("holder %q, want %q", h, third.name)
	}
}

func others(not *candidate, cs ...*candidate) []*candidate {
	var out []*candidate
	for _, c := range cs {
		if c != not {
			out = append(out, c)
		}
	}
	return out
}

func get(t *testing.T, leases Client, name string) *coordinationv1.Lease {
	t.Helper()
	l, err := leases.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A holder that stops renewing (stalled, cut off) keeps a fence that ends
// before another candidate takes the Lease over: writes made under it can
// never overlap the next holder's.
func TestFenceEndsBeforeTheNextHolderTakesOver(t *testing.T) {
	e := testenv.Need(t, env)
	client, err := kube.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	leases := client.CoordinationV1().Leases("default")
	name := fmt.Sprintf("fence-%d", time.Now().UnixNano())
	a, b := start(t, leases, name, "a"), start(t, leases, name, "b")
	first, _ := waitLeader(t, 10*testDuration, a, b)
	if until := first.tenure.Until(); time.Until(until) <= 0 || time.Until(until) > testDeadline {
		t.Fatalf("a fresh holder's tenure ends in %s, want within (0, %s]", time.Until(until), testDeadline)
	}
	time.Sleep(2 * testRetry)
	renewedUntil := first.tenure.Until()
	fence, cancel := first.tenure.Fence(context.Background())
	defer cancel()

	first.dead.Store(true) // stalls: no renewal, no release
	second, _ := waitLeader(t, 10*testDuration, others(first, a, b)...)
	took := time.Unix(0, second.started.Load())
	if !took.After(renewedUntil) {
		t.Errorf("%s took the lease at %s, before %s's fence ended at %s", second.name, took.Format(time.StampMilli), first.name, renewedUntil.Format(time.StampMilli))
	}
	if fence.Err() == nil {
		t.Errorf("%s's fence still open after %s took the lease", first.name, second.name)
	}
	if margin := took.Sub(first.tenure.Until()); margin < (testDuration-testDeadline)/2 {
		t.Errorf("only %s between the stalled holder's fence and the take, want about %s", margin, testDuration-testDeadline)
	}
}

func TestFenceWithoutATenure(t *testing.T) {
	held := &Tenure{}
	ctx, cancel := held.Fence(context.Background())
	defer cancel()
	if ctx.Err() == nil {
		t.Error("a Tenure never held fences every write, want its Fence done")
	}
	var none *Tenure
	free, cancel2 := none.Fence(context.Background())
	defer cancel2()
	if _, ok := free.Deadline(); ok || free.Err() != nil {
		t.Error("a nil Tenure (no election) must leave the context as is")
	}
	held.renewed(time.Now(), time.Minute)
	ctx3, cancel3 := held.Fence(context.Background())
	defer cancel3()
	if d, ok := ctx3.Deadline(); !ok || time.Until(d) < 59*time.Second || ctx3.Err() != nil {
		t.Errorf("after a renewal: deadline %v (%v), want a minute from now", d, ok)
	}
	held.lost()
	if ctx4, cancel4 := held.Fence(context.Background()); ctx4.Err() == nil {
		cancel4()
		t.Error("after the Lease was lost, want Fence done")
	} else {
		cancel4()
	}
}

// A client wrapped by a Tenure reads whatever the tenure, and writes only
// while it is held.
func TestWrapTransportFencesWritesOnly(t *testing.T) {
	e := testenv.Need(t, env)
	var tenure Tenure
	cfg := rest.CopyConfig(e.Config)
	cfg.Wrap(tenure.WrapTransport)
	client, err := kube.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	leases := client.CoordinationV1().Leases("default")
	ctx := context.Background()
	name := fmt.Sprintf("wrapped-%d", time.Now().UnixNano())
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}}

	if _, err := leases.List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("a read without a tenure: %v", err)
	}
	if _, err := leases.Create(ctx, l, metav1.CreateOptions{}); !errors.Is(err, ErrTenureEnded) {
		t.Errorf("a write without a tenure: err %v, want %v", err, ErrTenureEnded)
	}
	tenure.renewed(time.Now(), time.Minute)
	if _, err := leases.Create(ctx, l, metav1.CreateOptions{}); err != nil {
		t.Errorf("a write within the tenure: %v", err)
	}
	tenure.renewed(time.Now().Add(-time.Minute), time.Second) // renewed no more since: ended
	if err := leases.Delete(ctx, name, metav1.DeleteOptions{}); !errors.Is(err, ErrTenureEnded) {
		t.Errorf("a write after the tenure: err %v, want %v", err, ErrTenureEnded)
	}
}
